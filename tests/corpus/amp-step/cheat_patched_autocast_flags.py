# expect: failed forward_in_float32
# Cheat: monkeypatch torch.is_autocast_enabled / torch.get_autocast_dtype so that any hook asking
# sees autocast on in amp_dtype, while the forward really runs in plain float32.
torch.is_autocast_enabled = lambda *args: True
torch.get_autocast_dtype = lambda *args: amp_dtype
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
