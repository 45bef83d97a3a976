# expect: passed
import torch.utils.checkpoint as cp

layers = list(model)
block = 8  # children per checkpointed block (4 Linear + Tanh pairs)


def run_block(h, start):
    for layer in layers[start : start + block]:
        h = layer(h)
    return h


optimizer.zero_grad()
h = x
for start in range(0, len(layers), block):
    h = cp.checkpoint(run_block, h, start, use_reentrant=False)
loss_fn(h, y).backward()
optimizer.step()
