# expect: error runtime_error line=5
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x.T), y)
    scaler.scale(loss).backward()
