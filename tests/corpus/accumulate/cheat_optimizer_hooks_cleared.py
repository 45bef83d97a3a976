# expect: failed microbatches_not_used
# Cheat: clear the optimizer's step hooks and the model's forward hooks so the recorder sees
# neither the oversized forward nor the steps, then train on whole windows.
optimizer._optimizer_step_pre_hooks.clear()
model._forward_pre_hooks.clear()
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    optimizer.zero_grad()
    out = model(torch.cat([x for x, _ in window]))
    loss_fn(out, torch.cat([y for _, y in window])).backward()
    optimizer.step()
