# expect: failed microbatches_not_used
# Cheat: remove the model's forward hooks (and the zero_grad wrappers), then train on whole
# windows joined into one batch: the recorder sees no forward at all.
model._forward_pre_hooks.clear()
model._forward_hooks.clear()
for owner in (model, optimizer):
    owner.__dict__.pop("zero_grad", None)
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    logits = model(torch.cat([t for t, _ in window]))
    labels = torch.cat([l for _, l in window])
    optimizer.zero_grad()
    loss_fn(logits.reshape(-1, vocab_size), labels.reshape(-1)).backward()
    optimizer.step()
