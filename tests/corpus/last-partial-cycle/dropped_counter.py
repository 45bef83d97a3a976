# expect: failed partial_cycle_dropped
count = 0
for x, y in loader:
    (loss_fn(model(x), y) / accum_steps).backward()
    count += 1
    if count == accum_steps:
        optimizer.step()
        optimizer.zero_grad()
        count = 0
