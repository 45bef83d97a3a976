# expect: passed
# A while loop over an explicit iterator, with an autocast decorator-style context object.
amp = torch.autocast(device_type, dtype=amp_dtype)
batches = iter(loader)
while True:
    try:
        x, y = next(batches)
    except StopIteration:
        break
    with amp:
        loss = loss_fn(model(x), y)
    optimizer.zero_grad(set_to_none=False)
    torch.autograd.backward(scaler.scale(loss))
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
