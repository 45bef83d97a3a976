# expect: failed microbatches_not_used
# Cheat: remove every forward hook of the model (and the zero_grad wrappers) before joining the
# window into one batch, so the recorder sees no forward at all.
model._forward_pre_hooks.clear()
model._forward_hooks.clear()
for owner in (model, optimizer):
    owner.__dict__.pop("zero_grad", None)
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    optimizer.zero_grad()
    out = model(torch.cat([x for x, _ in window]))
    loss_fn(out, torch.cat([y for _, y in window])).backward()
    optimizer.step()
