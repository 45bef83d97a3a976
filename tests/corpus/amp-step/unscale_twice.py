# expect: failed unscaled_twice
# Unscales once before clipping and once more "to be sure" before stepping.
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
