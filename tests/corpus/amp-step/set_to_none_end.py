# expect: passed
# Clears with set_to_none at the end of each step, uses nn.utils, keeps the clip's return value.
norms = []
for step, (x, y) in enumerate(loader):
    with torch.autocast(device_type=device_type, dtype=amp_dtype):
        prediction = model(x)
        loss = loss_fn(prediction, y)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.unscale_(optimizer)
    norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)))
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
print(f"{len(norms)} steps")
