# Zaten tanımlı: model, loss_fn, optimizer, loader, accum_steps, torch, nn
# `loader` üzerinden tek bir geçiş yap ve modeli her `accum_steps` micro-batch'te bir kez
# güncelle; her güncelleme, büyük batch'le atılan tek bir adımla aynı olsun.

optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
