# expect: error syntax_error line=3
for x, y in loader:
    with torch.autocast(device_type, dtype=amp_dtype)
        loss = loss_fn(model(x), y)
