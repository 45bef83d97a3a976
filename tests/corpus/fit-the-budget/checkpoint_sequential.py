# expect: passed
from torch.utils.checkpoint import checkpoint_sequential

optimizer.zero_grad()
# 4 segments for 16 layers: keep the segment boundaries, recompute one segment at a time.
out = checkpoint_sequential(model, 4, x, use_reentrant=False)
loss_fn(out, y).backward()
optimizer.step()
