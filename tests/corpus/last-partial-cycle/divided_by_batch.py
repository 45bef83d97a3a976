# expect: failed wrong_loss_scale
n = len(loader)
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / len(x)).backward()
    if (step + 1) % accum_steps == 0 or step + 1 == n:
        optimizer.step()
        optimizer.zero_grad()
