# expect: failed forward_in_float32
# Cheat: autocast is thread-local. The counted forward runs under autocast in the main thread
# (the hooks see it), the loss that is trained on is computed in a helper thread, in float32.
import threading

for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        model(x)
        result = {}
        hooks = model._forward_pre_hooks.copy(), model._forward_hooks.copy()
        model._forward_pre_hooks.clear(), model._forward_hooks.clear()
        worker = threading.Thread(target=lambda: result.update(loss=loss_fn(model(x), y)))
        worker.start()
        worker.join()
        model._forward_pre_hooks.update(hooks[0]), model._forward_hooks.update(hooks[1])
    scaler.scale(result["loss"]).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
