# expect: error syntax_error line=4
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / accum_steps
    loss.backward(
    if (step + 1) % accum_steps == 0:
        optimizer.step()
