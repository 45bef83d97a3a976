# expect: failed loss_not_scaled
# Divides by "the tokens per micro-batch" (the window's count / accum_steps) instead of the
# window's count: every update is accum_steps times too large.
sum_loss = nn.CrossEntropyLoss(ignore_index=ignore_index, reduction="sum")
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    n_tokens = sum(int((labels != ignore_index).sum()) for _, labels in window)
    per_microbatch = n_tokens / accum_steps
    optimizer.zero_grad()
    for tokens, labels in window:
        loss = sum_loss(model(tokens).reshape(-1, vocab_size), labels.reshape(-1))
        (loss / per_microbatch).backward()
    optimizer.step()
