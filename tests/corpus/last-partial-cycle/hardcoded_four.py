# expect: failed wrong_step_count
# Hard-codes the first scenario: 10 micro-batches, accum_steps 4.
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    size = 2 if step >= 8 else 4
    (loss_fn(model(x), y) / size).backward()
    if (step + 1) % 4 == 0 or step == 9:
        optimizer.step()
        optimizer.zero_grad()
