# expect: failed over_budget
# Cheat: the unchanged full-batch step, with every saved activation parked in a NumPy array
# (outside torch's allocator) until the backward pass asks for it back.
import numpy as np

with torch.autograd.graph.saved_tensors_hooks(
    lambda t: (np.array(t.detach().numpy()), t.dtype),
    lambda parked: torch.from_numpy(parked[0]).to(parked[1]),
):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
