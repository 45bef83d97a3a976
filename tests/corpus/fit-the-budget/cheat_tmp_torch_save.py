# expect: failed over_budget
# Cheat: the unchanged full-batch step, with every saved activation moved out of the process
# into /tmp with torch.save during the forward pass and torch.load-ed during the backward.
import io
import os
import tempfile


def pack(t):
    handle, path = tempfile.mkstemp(dir="/tmp")
    with os.fdopen(handle, "wb") as f:
        torch.save(t.detach().clone(), f)
    return path


def unpack(path):
    with open(path, "rb") as f:
        return torch.load(io.BytesIO(f.read()))


with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
