# expect: failed forward_in_float32
# Cheat: a decoy model(x) under autocast (the hooks see an autocast forward), while the loss that
# is trained on comes from model.forward(x) outside autocast, in float32, unseen by any hook.
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        model(x)
    loss = loss_fn(model.forward(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
