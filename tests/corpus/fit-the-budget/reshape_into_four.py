# expect: error runtime_error line=4
# Works only when 4 divides the batch.
optimizer.zero_grad()
xs = x.view(4, -1, x.shape[1])
ys = y.view(4, -1, y.shape[1])
for xc, yc in zip(xs, ys):
    (loss_fn(model(xc), yc) / 4).backward()
optimizer.step()
