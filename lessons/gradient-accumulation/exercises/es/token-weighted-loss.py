# Ya tienes definidos: model, loss_fn, optimizer, loader, accum_steps, ignore_index,
# vocab_size, torch, nn
# Cada micro-batch es un par (tokens, labels) con forma (batch, seq_len); en el padding, las
# etiquetas valen ignore_index, y los micro-batches tienen cantidades muy distintas de tokens
# reales. model(tokens) devuelve logits con forma (batch, seq_len, vocab_size). Cada
# actualización debe equivaler a un paso con todos los tokens de su ventana de acumulación.

optimizer.zero_grad()
for step, (tokens, labels) in enumerate(loader):
    logits = model(tokens)
    loss = loss_fn(logits.reshape(-1, vocab_size), labels.reshape(-1)) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
