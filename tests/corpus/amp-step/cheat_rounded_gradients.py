# expect: failed autocast_not_used
# Cheat: a float32 forward that fakes low-precision noise: the gradients are rounded to amp_dtype
# before unscaling, so they carry bfloat16-sized errors without any autocast.
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    for p in model.parameters():
        p.grad = p.grad.to(amp_dtype).float()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
