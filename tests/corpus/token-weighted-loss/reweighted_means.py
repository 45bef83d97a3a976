# expect: passed
# Keeps loss_fn's per-micro-batch mean but weights it by the micro-batch's share of tokens.
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    counts = [int((lab != ignore_index).sum()) for _, lab in window]
    optimizer.zero_grad()
    for (tok, lab), count in zip(window, counts):
        mean = loss_fn(model(tok).reshape(-1, vocab_size), lab.reshape(-1))
        (mean * count / sum(counts)).backward()
    optimizer.step()
