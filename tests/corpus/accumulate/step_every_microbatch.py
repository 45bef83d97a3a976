# expect: failed stepped_every_microbatch
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / accum_steps
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
