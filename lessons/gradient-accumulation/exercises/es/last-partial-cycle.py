# Ya tienes definidos: model, loss_fn, optimizer, loader, accum_steps, torch, nn
# len(loader) no siempre es múltiplo de accum_steps. Haz una pasada sobre `loader` de modo que
# cada actualización, incluida la última, equivalga a un paso con los micro-batches que abarca.

optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
