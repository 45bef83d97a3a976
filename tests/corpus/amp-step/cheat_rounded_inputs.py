# expect: failed forward_in_float32
# Cheat: no autocast; the inputs are rounded to amp_dtype and back, hoping the float32 forward
# then lands close enough to the autocast one, and the recorder's flags are set by hand.
recorder = next(iter(model._forward_pre_hooks.values())).__self__
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x.to(amp_dtype).float()), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
recorder.autocast_forwards = recorder.forwards
recorder.autocast_dtypes = [str(amp_dtype)]
