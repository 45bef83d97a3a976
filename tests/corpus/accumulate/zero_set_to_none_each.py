# expect: failed zeroed_every_microbatch
for step, (x, y) in enumerate(loader):
    model.zero_grad(set_to_none=True)
    (loss_fn(model(x), y) / accum_steps).backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
