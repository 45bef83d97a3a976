# expect: failed autocast_not_used
# Uses the scaler perfectly but forgets autocast: everything runs in float32.
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
