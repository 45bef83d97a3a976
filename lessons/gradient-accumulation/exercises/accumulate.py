# Already defined for you: model, loss_fn, optimizer, loader, accum_steps, torch, nn
# Make one pass over `loader` and update the model once every `accum_steps` micro-batches,
# so that each update matches one step on the big batch.

optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
