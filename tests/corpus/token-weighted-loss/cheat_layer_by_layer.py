# expect: failed microbatches_not_used
# Cheat: the whole window joined into one batch and run layer by layer (`for layer in model`),
# so the forward hook on `model` never fires.
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    h = torch.cat([t for t, _ in window])
    for layer in model:
        h = layer(h)
    labels = torch.cat([l for _, l in window])
    optimizer.zero_grad()
    loss_fn(h.reshape(-1, vocab_size), labels.reshape(-1)).backward()
    optimizer.step()
