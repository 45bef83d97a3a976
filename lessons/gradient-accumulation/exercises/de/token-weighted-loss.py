# Bereits definiert: model, loss_fn, optimizer, loader, accum_steps, ignore_index,
# vocab_size, torch, nn
# Jeder Micro-Batch ist ein Paar (tokens, labels) der Form (batch, seq_len); an
# Padding-Stellen sind die Labels gleich ignore_index, und die Micro-Batches enthalten sehr
# unterschiedlich viele echte Tokens. model(tokens) liefert Logits der Form
# (batch, seq_len, vocab_size). Jedes Update muss einem Step auf allen Tokens seines
# Akkumulationsfensters entsprechen.

optimizer.zero_grad()
for step, (tokens, labels) in enumerate(loader):
    logits = model(tokens)
    loss = loss_fn(logits.reshape(-1, vocab_size), labels.reshape(-1)) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
