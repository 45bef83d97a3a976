# expect: passed
seen = 0
model.zero_grad()
for x, y in loader:
    out = model(x)
    loss = loss_fn(out, y)
    (loss / accum_steps).backward()
    seen += 1
    if seen % accum_steps == 0:
        optimizer.step()
        model.zero_grad()
