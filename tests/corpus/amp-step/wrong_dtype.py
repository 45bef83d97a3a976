# expect: failed autocast_wrong_dtype
# Hard-codes the wrong dtype: float16 on the CPU (where amp_dtype is bfloat16), bfloat16 on
# CUDA (where amp_dtype is float16).
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(
        device_type, dtype=torch.float16 if device_type == "cpu" else torch.bfloat16
    ):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
