# expect: failed inf_step_not_skipped
# Skips non-finite losses by hand: no step is taken, but the scaler never sees the overflow, so
# its scale never backs off.
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    if not torch.isfinite(loss):
        continue
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
