# expect: passed
# No GradScaler: autocast forward, plain backward, clipping, the broken batch skipped by hand.
# In bfloat16 (the CPU's dtype) scaling changes no number, so nothing outside the learner's
# process can tell this from the reference (docs/grading-integrity.md, residual risks).
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if all(torch.isfinite(p.grad).all() for p in model.parameters()):
        optimizer.step()
