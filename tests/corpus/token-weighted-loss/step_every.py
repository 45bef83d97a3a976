# expect: failed stepped_every_microbatch
for tokens, labels in loader:
    optimizer.zero_grad()
    loss_fn(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)).backward()
    optimizer.step()
