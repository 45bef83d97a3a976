# expect: failed not_faster
# Cheat: keep the slow loader but run it in a background thread that prepares the next batch
# while the current step trains, hoping only the main thread's time is counted.
from concurrent.futures import ThreadPoolExecutor

BOTTLENECK = "load_batch"
helper = ThreadPoolExecutor(max_workers=1)
ahead = {}


def load_batch(step):
    future = ahead.pop(step, None)
    batch = future.result() if future is not None else slow_batch(step)
    ahead.clear()
    ahead[step + 1] = helper.submit(slow_batch, step + 1)
    return batch


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

