# expect: failed microbatches_not_used
# Cheat: the whole window in one forward pass, micro-batches stacked along dim 1 ([mb, a, 8]), so
# that dim 0 of the model's input still has the micro-batch size the forward hook expects
# (BatchNorm wants its features in dim 1: on that model the window is simply concatenated).
if any(isinstance(m, nn.BatchNorm1d) for m in model):
    join = torch.cat
else:
    join = lambda tensors: torch.stack(tensors, dim=1)  # noqa: E731
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    optimizer.zero_grad()
    loss_fn(model(join([x for x, _ in window])), join([y for _, y in window])).backward()
    optimizer.step()
