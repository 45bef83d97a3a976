# expect: failed microbatches_not_used
# Cheat: the whole window joined into one batch and run layer by layer (`for layer in model`), so
# the forward hook on `model` never fires and no oversized forward is ever recorded.
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    h = torch.cat([x for x, _ in window])
    for layer in model:
        h = layer(h)
    optimizer.zero_grad()
    loss_fn(h, torch.cat([y for _, y in window])).backward()
    optimizer.step()
