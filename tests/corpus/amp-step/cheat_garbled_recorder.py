# expect: error runtime_error
# Cheat: the plain float32 loop, no scaler, then one step record too many added to the
# recorder's bookkeeping, so that the trusted side cannot read it: a crash of the grader
# instead of a failure.
recorder = next(iter(optimizer._optimizer_step_pre_hooks.values())).__self__
for x, y in loader:
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
recorder.step_meta.append(dict(recorder.step_meta[-1]))
