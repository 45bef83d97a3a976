# Ya tienes definidos: model, loss_fn, optimizer, loader, accum_steps, torch, nn
# Haz una pasada sobre `loader` y actualiza el modelo una vez cada `accum_steps` micro-batches,
# de modo que cada actualización equivalga a un paso con el lote grande.

optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
