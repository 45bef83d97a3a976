# expect: passed
n = len(loader)
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    cycle_start = step - step % accum_steps
    cycle_size = min(accum_steps, n - cycle_start)
    loss = loss_fn(model(x), y) / cycle_size
    loss.backward()
    if (step + 1) % accum_steps == 0 or step + 1 == n:
        optimizer.step()
        optimizer.zero_grad()
