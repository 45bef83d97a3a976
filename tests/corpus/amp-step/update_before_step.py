# expect: failed wrong_order
# scaler.update() before scaler.step(): update resets the scaler, so step unscales the
# gradients a second time (and torch then stops the loop on the next batch).
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    scaler.step(optimizer)
