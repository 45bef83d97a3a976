# expect: failed over_budget
# Cheat: the unchanged full-batch step, with every saved activation written to a file under
# /dev/shm during the forward pass and read back during the backward: the memory lives in files.
import itertools

import numpy as np

counter = itertools.count()


def pack(t):
    path = f"/dev/shm/act-{next(counter)}.bin"
    t.detach().numpy().tofile(path)
    return path, t.shape, t.dtype


def unpack(saved):
    path, shape, dtype = saved
    return torch.from_numpy(np.fromfile(path, dtype=np.float64)).reshape(shape).to(dtype)


with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
