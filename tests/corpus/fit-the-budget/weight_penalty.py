# expect: failed gradients_mismatch
# An extra L2 term in every chunk's loss: the gradient is no longer the plain step's.
optimizer.zero_grad()
for xc, yc in zip(x.tensor_split(4), y.tensor_split(4)):
    penalty = sum((p**2).sum() for p in model.parameters())
    ((loss_fn(model(xc), yc) + 1e-3 * penalty) * len(xc) / len(x)).backward()
optimizer.step()
