# expect: failed step_off_by_one
# Steps when step % accum_steps == 0 (skipping step 0) and once more at the end: the first
# window takes one micro-batch too many, the last one too few.
n = len(loader)
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / accum_steps).backward()
    if (step > 0 and step % accum_steps == 0) or step + 1 == n:
        optimizer.step()
        optimizer.zero_grad()
