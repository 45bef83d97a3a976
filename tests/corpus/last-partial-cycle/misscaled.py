# expect: failed partial_cycle_misscaled
n = len(loader)
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / accum_steps).backward()
    if (step + 1) % accum_steps == 0 or step + 1 == n:
        optimizer.step()
        optimizer.zero_grad()
