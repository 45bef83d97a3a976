# expect: failed chunks_misweighted
# torch.chunk makes the last chunk smaller when 4 does not divide the batch.
optimizer.zero_grad()
for xc, yc in zip(x.chunk(4), y.chunk(4)):
    (loss_fn(model(xc), yc) / 4).backward()
optimizer.step()
