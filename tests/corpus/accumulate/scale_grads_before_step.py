# expect: passed
for step, (x, y) in enumerate(loader):
    loss_fn(model(x), y).backward()
    if (step + 1) % accum_steps == 0:
        for p in model.parameters():
            p.grad.div_(accum_steps)
        optimizer.step()
        optimizer.zero_grad()
