# expect: failed graphs_kept_alive
# Cheat: every micro-batch goes through the model on its own (the forward hook sees micro-batch
# sizes), but the losses are kept in a list and summed with one backward() per window.
losses = []
for step, (x, y) in enumerate(loader):
    losses.append(loss_fn(model(x), y))
    if (step + 1) % accum_steps == 0:
        optimizer.zero_grad()
        (sum(losses) / len(losses)).backward()
        optimizer.step()
        losses = []
