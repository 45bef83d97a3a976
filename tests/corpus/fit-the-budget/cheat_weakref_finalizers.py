# expect: failed over_budget
# Cheat: the unchanged full-batch step, but every saved activation is handed to autograd as a
# handle, the tensor kept in a side table and a weakref finalizer on each handle, so that a meter
# tracking tensors through autograd would see them freed as soon as they are saved.
import weakref


class Handle:
    pass


table = {}


def pack(t):
    handle = Handle()
    table[id(handle)] = t
    weakref.finalize(handle, table.pop, id(handle), None)
    return handle


with torch.autograd.graph.saved_tensors_hooks(pack, lambda handle: table[id(handle)]):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
