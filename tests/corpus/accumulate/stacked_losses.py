# expect: failed graphs_kept_alive
# Right gradients, but every micro-batch's graph stays alive until one backward per window: the
# memory of the whole window, which accumulation exists to avoid.
losses = []
for x, y in loader:
    losses.append(loss_fn(model(x), y))
    if len(losses) == accum_steps:
        optimizer.zero_grad()
        torch.stack(losses).mean().backward()
        optimizer.step()
        losses = []
