# expect: failed scale_not_updated
# Forgets scaler.update(): torch refuses the second unscale_ ("unscale_() is being called after
# step()"); the grader names the real mistake instead.
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
