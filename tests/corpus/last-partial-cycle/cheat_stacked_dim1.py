# expect: failed microbatches_not_used
# Cheat: each window (the short last one too) in one forward pass, its micro-batches stacked
# along dim 1 ([mb, k, 8]) so that dim 0 keeps the micro-batch size the forward hook expects.
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    x = torch.stack([x for x, _ in window], dim=1)
    y = torch.stack([y for _, y in window], dim=1)
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
