# expect: failed token_mean_of_means
optimizer.zero_grad()
for step, (tokens, labels) in enumerate(loader):
    loss = loss_fn(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
