# expect: failed loss_not_scaled
n = 0
for x, y in loader:
    loss_fn(model(x), y).backward()
    n += 1
    if n % accum_steps == 0:
        optimizer.step()
        model.zero_grad()
