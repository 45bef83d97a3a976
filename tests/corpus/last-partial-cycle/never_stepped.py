# expect: failed never_stepped
n = len(loader)
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    cycle_start = step - step % accum_steps
    (loss_fn(model(x), y) / min(accum_steps, n - cycle_start)).backward()
    if (step + 1) % accum_steps == 0 or step + 1 == n:
        optimizer.zero_grad()
