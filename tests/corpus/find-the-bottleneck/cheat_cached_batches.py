# expect: failed not_faster
# Cheat: cache every batch the slow loader builds, and warm the cache by running many steps
# while the script runs, hoping the timed steps are ones already seen.
BOTTLENECK = "load_batch"
cache = {}


def load_batch(step):
    if step not in cache:
        cache[step] = slow_batch(step)
    return cache[step]



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


for step in range(64):
    load_batch(step)
