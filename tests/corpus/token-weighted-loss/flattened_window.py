# expect: failed microbatches_not_used
window_tokens, window_labels = [], []
for tokens, labels in loader:
    window_tokens.append(tokens)
    window_labels.append(labels)
    if len(window_tokens) == accum_steps:
        optimizer.zero_grad()
        logits = model(torch.cat(window_tokens))
        loss_fn(logits.reshape(-1, vocab_size), torch.cat(window_labels).reshape(-1)).backward()
        optimizer.step()
        window_tokens, window_labels = [], []
