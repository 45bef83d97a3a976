# expect: failed parameters_mismatch
optimizer.zero_grad()
for xc, yc in zip(x.tensor_split(4), y.tensor_split(4)):
    (loss_fn(model(xc), yc) * len(xc) / len(x)).backward()
optimizer.step()
with torch.no_grad():
    for p in model.parameters():
        p.mul_(0.999)  # weight decay by hand, after the step
