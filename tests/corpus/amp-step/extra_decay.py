# expect: failed parameters_mismatch
# Right gradients at every step, but adds a learning-rate decay nobody asked for.
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    for group in optimizer.param_groups:
        group["lr"] *= 0.9
