# expect: failed zeroed_every_chunk
# Micro-batches, but zero_grad() inside the chunk loop: each chunk wipes out the ones before,
# and only the last chunk reaches the step.
chunks = 4
for xc, yc in zip(x.tensor_split(chunks), y.tensor_split(chunks)):
    optimizer.zero_grad()
    (loss_fn(model(xc), yc) * len(xc) / len(x)).backward()
optimizer.step()
