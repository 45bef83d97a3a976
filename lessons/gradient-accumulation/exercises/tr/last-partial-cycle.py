# Zaten tanımlı: model, loss_fn, optimizer, loader, accum_steps, torch, nn
# len(loader) her zaman accum_steps'in tam katı değildir. `loader` üzerinden tek bir geçiş
# yap; sonuncusu da dahil her güncelleme, kapsadığı micro-batch'lerle atılan tek bir adımla
# aynı olsun.

optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
