# expect: failed optimizer_stepped_directly
# optimizer.step() and scaler.update() without any scaler.step(): torch itself would fail with
# "No inf checks were recorded prior to update."
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
