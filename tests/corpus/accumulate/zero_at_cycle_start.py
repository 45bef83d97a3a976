# expect: passed
for step, (x, y) in enumerate(loader):
    if step % accum_steps == 0:
        model.zero_grad()
    loss = loss_fn(model(x), y) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
