# expect: failed microbatches_not_used
# Cheat: the whole window in one forward pass, its micro-batches joined along the sequence
# dimension ([mb, k * seq_len]), so dim 0 keeps the micro-batch size the forward hook expects.
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    tokens = torch.cat([t for t, _ in window], dim=1)
    labels = torch.cat([l for _, l in window], dim=1)
    optimizer.zero_grad()
    loss_fn(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)).backward()
    optimizer.step()
