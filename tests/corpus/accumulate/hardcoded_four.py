# expect: failed wrong_step_count
# Hard-codes accum_steps = 4 (the first scenario); the hidden scenarios use other values.
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / 4).backward()
    if (step + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
