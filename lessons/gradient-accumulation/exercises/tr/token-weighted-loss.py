# Zaten tanımlı: model, loss_fn, optimizer, loader, accum_steps, ignore_index,
# vocab_size, torch, nn
# Her micro-batch, şekli (batch, seq_len) olan bir (tokens, labels) çiftidir; padding
# konumlarında etiketler ignore_index'e eşittir ve micro-batch'lerdeki gerçek token sayıları
# birbirinden çok farklıdır. model(tokens), şekli (batch, seq_len, vocab_size) olan logit'ler
# döndürür. Her güncelleme, biriktirme penceresindeki bütün token'larla atılan tek bir adımla
# aynı olmalı.

optimizer.zero_grad()
for step, (tokens, labels) in enumerate(loader):
    logits = model(tokens)
    loss = loss_fn(logits.reshape(-1, vocab_size), labels.reshape(-1)) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
