# expect: failed wrong_step_count
# Steps once more after the loop even when no cycle is left over.
n = len(loader)
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    cycle_start = step - step % accum_steps
    (loss_fn(model(x), y) / min(accum_steps, n - cycle_start)).backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
optimizer.step()
optimizer.zero_grad()
