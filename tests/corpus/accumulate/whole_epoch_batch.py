# expect: failed microbatches_not_used
batches = list(loader)
x = torch.cat([b[0] for b in batches])
y = torch.cat([b[1] for b in batches])
optimizer.zero_grad()
loss_fn(model(x), y).backward()
optimizer.step()
