# expect: failed missing_gradients
# Reentrant checkpointing with an input that does not require grad: the first segment's
# parameters get no gradient at all.
from torch.utils.checkpoint import checkpoint_sequential

optimizer.zero_grad()
loss_fn(checkpoint_sequential(model, 4, x, use_reentrant=True), y).backward()
optimizer.step()
