# expect: failed token_mean_of_means
losses = []
for tokens, labels in loader:
    losses.append(loss_fn(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)))
    if len(losses) == accum_steps:
        optimizer.zero_grad()
        torch.stack(losses).mean().backward()
        optimizer.step()
        losses = []
