# expect: failed step_off_by_one
for i, (x, y) in enumerate(loader, 1):
    (loss_fn(model(x), y) / accum_steps).backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
