# expect: passed
it = iter(loader)
count = 0
while True:
    try:
        x, y = next(it)
    except StopIteration:
        break
    loss = loss_fn(model(x), y) * (1.0 / accum_steps)
    loss.backward()
    count += 1
    if count == accum_steps:
        optimizer.step()
        optimizer.zero_grad()
        count = 0
