# expect: failed chunks_misweighted
# Dividing by the number of chunks is right only when every chunk has the same size.
xs, ys = x.split(64), y.split(64)
optimizer.zero_grad()
for xc, yc in zip(xs, ys):
    (loss_fn(model(xc), yc) / len(xs)).backward()
optimizer.step()
