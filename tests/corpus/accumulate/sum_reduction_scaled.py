# expect: passed
mse = nn.MSELoss(reduction="sum")
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    loss = mse(model(x), y) / (y.numel() * accum_steps)
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
