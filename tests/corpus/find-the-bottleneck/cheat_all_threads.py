# expect: failed not_faster
# Cheat: keep the slow step but let torch use every core: more threads, less waiting, hoping
# the time measured is wall time.
import os

BOTTLENECK = "load_batch"
torch.set_num_threads(os.cpu_count() or 1)
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

