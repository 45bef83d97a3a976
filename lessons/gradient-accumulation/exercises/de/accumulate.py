# Bereits definiert: model, loss_fn, optimizer, loader, accum_steps, torch, nn
# Durchlaufe `loader` einmal und mach alle `accum_steps` Micro-Batches ein Update des Modells,
# das einem Step auf dem großen Batch entspricht.

optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
