# expect: failed gradients_mismatch
sum_loss = nn.CrossEntropyLoss(ignore_index=ignore_index, reduction="sum")
optimizer.zero_grad()
n_tokens = 0
for step, (tokens, labels) in enumerate(loader):
    sum_loss(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)).backward()
    n_tokens += int((labels != ignore_index).sum())
    if (step + 1) % accum_steps == 0:
        for p in model.parameters():
            p.grad /= n_tokens
            p.grad += 0.01 * torch.randn_like(p.grad)
        optimizer.step()
        optimizer.zero_grad()
        n_tokens = 0
