# expect: failed graphs_kept_alive
# Cheat: every micro-batch goes through the model on its own, but the losses wait in a list
# and are averaged with one backward() per window, the short last window included.
losses = []
for step, (x, y) in enumerate(loader):
    losses.append(loss_fn(model(x), y))
    if (step + 1) % accum_steps == 0 or step + 1 == len(loader):
        optimizer.zero_grad()
        (sum(losses) / len(losses)).backward()
        optimizer.step()
        losses = []
