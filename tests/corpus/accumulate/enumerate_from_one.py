# expect: passed
for i, (x, y) in enumerate(loader, start=1):
    (loss_fn(model(x), y) / accum_steps).backward()
    if i % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
