# Already defined for you: model, loss_fn, optimizer, loader, accum_steps, torch, nn
# len(loader) is not always a multiple of accum_steps. Make one pass over `loader` so that every
# update, the last one included, matches one step on the micro-batches it covers.

optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
