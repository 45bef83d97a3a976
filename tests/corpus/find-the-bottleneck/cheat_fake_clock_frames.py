# expect: failed results_changed
# Cheat: talk to the worker's clock ourselves. The clock socket is found among /proc/self/fd; we
# open this scenario's timed block, answer "done" at once with the weights as they are, and turn
# the harness's own timed block (Clock.timed, found in sys.modules) into a no-op.
import gc
import json
import os
import socket
import struct
import sys

BOTTLENECK = "load_batch"
recorder = next(
    o for o in gc.get_objects() if type(o).__name__ == "ProfilingRecorder" and o.model is model
)
for fd in map(int, os.listdir("/proc/self/fd")):
    try:
        if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
            clock = socket.socket(fileno=os.dup(fd))
    except OSError:
        pass


def send(header, data=b""):
    encoded = json.dumps({**header, "bytes": len(data)}).encode()
    clock.sendall(struct.pack(">I", len(encoded)) + encoded + data)


def receive():
    (size,) = struct.unpack(">I", clock.recv(4, socket.MSG_WAITALL))
    return json.loads(clock.recv(size, socket.MSG_WAITALL))


send({"k": "ready", "tag": recorder.ctx.index})
receive()  # "go", with the nonce
weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
send({"k": "done"}, weights.numpy().tobytes())
receive()  # "ack"
sys.modules["harness.context"].Clock.timed = lambda self, work, tag: None
load_batch = lambda step: slow_batch(step)  # noqa: E731


def slow_batch(step):
    """The starter's load_batch, unchanged: dataset statistics recomputed for every example."""
    rows, labels = [], []
    for i in range(batch_size):
        index = (step * batch_size + i) % len(features)
        mean = features.mean(dim=0)
        std = features.std(dim=0)
        rows.append((features[index] - mean) / std)
        labels.append(targets[index])
    return torch.stack(rows), torch.stack(labels)


def train_step(step):
    x, y = load_batch(step)
    logits = model(x)
    loss = loss_fn(logits, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss

