# expect: failed grads_cleared_before_step
# Clears the gradients between backward() and the step: nothing is left to unscale or step
# (torch's own message would be "No inf checks were recorded for this optimizer").
for x, y in loader:
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    optimizer.zero_grad()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
