# expect: failed loss_not_scaled
n = len(loader)
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss_fn(model(x), y).backward()
    if (step + 1) % accum_steps == 0 or step + 1 == n:
        optimizer.step()
        optimizer.zero_grad()
