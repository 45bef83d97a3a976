# Bereits definiert: model, loss_fn, optimizer, loader, accum_steps, torch, nn
# len(loader) ist nicht immer ein Vielfaches von accum_steps. Durchlaufe `loader` einmal so,
# dass jedes Update, auch das letzte, einem Step auf genau den Micro-Batches entspricht, die
# es umfasst.

optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
