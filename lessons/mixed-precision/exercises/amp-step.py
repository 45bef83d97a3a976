# Already defined for you: model, loss_fn, optimizer, loader, scaler, device_type, amp_dtype,
# max_norm, torch, nn
# Turn this plain float32 loop into mixed precision: run the forward pass under autocast with
# amp_dtype, let `scaler` scale the loss, skip steps with inf/NaN gradients and adjust the scale,
# and clip the (unscaled!) gradients to max_norm before every step.

for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
