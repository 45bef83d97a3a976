# expect: failed graphs_kept_alive
# Cheat: every micro-batch goes through the model on its own, but the summed token losses wait
# in a list until one backward() per window, divided by the window's valid tokens.
sum_loss = nn.CrossEntropyLoss(ignore_index=ignore_index, reduction="sum")
losses, n_tokens = [], 0
for step, (tokens, labels) in enumerate(loader):
    losses.append(sum_loss(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)))
    n_tokens += int((labels != ignore_index).sum())
    if (step + 1) % accum_steps == 0:
        optimizer.zero_grad()
        (sum(losses) / n_tokens).backward()
        optimizer.step()
        losses, n_tokens = [], 0
