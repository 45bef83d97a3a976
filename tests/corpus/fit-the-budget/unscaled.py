# expect: failed loss_not_scaled
optimizer.zero_grad()
for xc, yc in zip(x.tensor_split(4), y.tensor_split(4)):
    loss_fn(model(xc), yc).backward()
optimizer.step()
