# Already defined for you: model, loss_fn, optimizer, loader, accum_steps, ignore_index,
# vocab_size, torch, nn
# Each micro-batch is (tokens, labels) of shape (batch, seq_len); labels equal ignore_index on
# padding, and micro-batches hold very different numbers of real tokens. model(tokens) returns
# logits of shape (batch, seq_len, vocab_size). Every update must match one step on all the
# tokens of its accumulation window.

optimizer.zero_grad()
for step, (tokens, labels) in enumerate(loader):
    logits = model(tokens)
    loss = loss_fn(logits.reshape(-1, vocab_size), labels.reshape(-1)) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
