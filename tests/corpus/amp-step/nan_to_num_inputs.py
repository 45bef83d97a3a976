# expect: failed inf_step_not_skipped
# "Repairs" the broken batch instead of letting the scaler skip it: its NaN/inf inputs become
# finite numbers, the scaler sees nothing wrong, and a step is taken on garbage data.
for x, y in loader:
    x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
