# expect: failed parameters_mismatch
n = len(loader)
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    cycle_start = step - step % accum_steps
    (loss_fn(model(x), y) / min(accum_steps, n - cycle_start)).backward()
    if (step + 1) % accum_steps == 0 or step + 1 == n:
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.99)
