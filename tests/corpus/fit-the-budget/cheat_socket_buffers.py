# expect: failed over_budget
# Cheat: the unchanged full-batch step, with every saved activation parked in the kernel: its
# bytes sit in the queues of unix socket pairs (closed on the sending side) during the forward
# pass and are read back during the backward, as if socket buffers were nobody's memory.
import socket
import weakref

parked = {}


def park(data):
    """Bytes into the queues of as many unix socket pairs as it takes; returns the readers."""
    readers, view = [], memoryview(data)
    while view:
        sender, receiver = socket.socketpair()
        sender.setblocking(False)
        try:
            while view:
                view = view[sender.send(view):]
        except BlockingIOError:
            pass
        sender.close()
        readers.append(receiver)
    return readers


def unpark(readers, size):
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    for r in readers:
        while chunk := r.recv_into(view[got:]):
            got += chunk
        r.close()
    return buf


def pack(t):
    if id(t) not in parked:
        data = t.detach().contiguous().numpy().tobytes()
        parked[id(t)] = {"readers": park(data), "size": len(data), "shape": t.shape}
        weakref.finalize(t, parked.pop, id(t), None)
    return parked[id(t)]


def unpack(handle):
    if "tensor" not in handle:  # a tensor saved twice is read back once
        data = unpark(handle.pop("readers"), handle["size"])
        handle["tensor"] = torch.frombuffer(data, dtype=torch.float64).reshape(handle["shape"])
    return handle["tensor"]


with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
