# expect: passed
# A summed loss over small slices, divided once by the number of values in the whole
# batch; intermediates are dropped as soon as they are used.
n = len(x)
size = 32
optimizer.zero_grad(set_to_none=True)
total = y.numel()
for start in range(0, n, size):
    out = model(x[start : start + size])
    loss = ((out - y[start : start + size]) ** 2).sum() / total
    loss.backward()
    del out, loss
optimizer.step()
