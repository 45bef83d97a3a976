# expect: failed partial_cycle_misscaled
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / accum_steps).backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
if len(loader) % accum_steps:
    optimizer.step()
    optimizer.zero_grad()
