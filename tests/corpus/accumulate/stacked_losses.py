# expect: passed
losses = []
for x, y in loader:
    losses.append(loss_fn(model(x), y))
    if len(losses) == accum_steps:
        optimizer.zero_grad()
        torch.stack(losses).mean().backward()
        optimizer.step()
        losses = []
