# expect: failed forward_in_float32
# Cheat: train in plain float32 (with the scaler), then find the recorder through its hook and
# rewrite its record so every forward seems to have run under autocast in amp_dtype.
recorder = next(iter(model._forward_pre_hooks.values())).__self__
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
recorder.autocast_forwards = recorder.forwards
recorder.autocast_dtypes = [str(amp_dtype)]
