# expect: failed forward_in_float32
# Cheat: the loop looks right, but a forward pre-hook of our own (it runs after the recorder's)
# switches autocast off for the model's forward, and a forward hook switches it back on.
model.register_forward_pre_hook(lambda *_: torch.set_autocast_enabled(device_type, False))
model.register_forward_hook(lambda *_: torch.set_autocast_enabled(device_type, True))
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
