# expect: error syntax_error line=3
optimizer.zero_grad()
for xc, yc in zip(x.tensor_split(4), y.tensor_split(4))
    (loss_fn(model(xc), yc) * len(xc) / len(x)).backward()
optimizer.step()
