# expect: failed not_faster
# Cheat: keep the slow loader but run it in a forked child process for every step, and read the
# batch back through a pipe, hoping the child's CPU time is not this process's.
import os

import numpy as np

BOTTLENECK = "load_batch"


def load_batch(step):
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        x, y = slow_batch(step)
        os.write(write_end, x.numpy().tobytes() + y.numpy().tobytes())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 1 << 16):
        data += chunk
    os.close(read_end)
    os.wait()
    split = batch_size * features.shape[1] * features.element_size()
    x = torch.from_numpy(np.frombuffer(data[:split], dtype=np.float64).copy())
    y = torch.from_numpy(np.frombuffer(data[split:], dtype=np.int64).copy())
    return x.reshape(batch_size, -1).to(features.dtype), y


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

