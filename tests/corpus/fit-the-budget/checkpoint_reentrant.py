# expect: passed
from torch.utils.checkpoint import checkpoint_sequential

optimizer.zero_grad()
# The reentrant variant needs an input that requires grad, or the first segment's
# parameters get no gradient.
inp = x.detach().requires_grad_()
out = checkpoint_sequential(model, 4, inp, use_reentrant=True)
loss_fn(out, y).backward()
optimizer.step()
