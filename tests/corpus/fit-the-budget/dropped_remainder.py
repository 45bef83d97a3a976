# expect: failed batch_not_covered
# Hard-coded 4 equal chunks: the examples left over by len(x) // 4 are never used.
size = len(x) // 4
optimizer.zero_grad()
for i in range(4):
    xc, yc = x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]
    (loss_fn(model(xc), yc) / 4).backward()
optimizer.step()
