# expect: error runtime_error
# Cheat: the unchanged full-batch step, then one forward size too many added to the recorder's
# bookkeeping, so that the trusted side cannot read it: a crash of the grader instead of a
# failure.
recorder = next(iter(optimizer._optimizer_step_pre_hooks.values())).__self__
optimizer.zero_grad()
loss_fn(model(x), y).backward()
optimizer.step()
recorder.forward_sizes.append(1)
