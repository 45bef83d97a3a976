# expect: failed never_stepped
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / accum_steps).backward()
    if (step + 1) % accum_steps == 0:
        optimizer.zero_grad()
