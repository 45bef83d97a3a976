# expect: failed weights_not_float32
# Casts the whole model to amp_dtype: low-precision weights, not mixed precision.
model.to(amp_dtype)
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x.to(amp_dtype)).float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
