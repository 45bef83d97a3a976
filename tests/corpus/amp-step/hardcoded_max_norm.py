# expect: failed gradients_mismatch
# Hard-codes the clip threshold instead of using max_norm (hidden scenarios use other values).
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.5)
    scaler.step(optimizer)
    scaler.update()
