# expect: passed
# Divide by accum_steps as usual, then fix up the last cycle's gradients after the loop.
optimizer.zero_grad()
pending = 0
for step, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / accum_steps).backward()
    pending += 1
    if pending == accum_steps:
        optimizer.step()
        optimizer.zero_grad()
        pending = 0
if pending:
    for p in model.parameters():
        if p.grad is not None:
            p.grad *= accum_steps / pending
    optimizer.step()
    optimizer.zero_grad()
