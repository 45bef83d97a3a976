# expect: failed wrong_loss_scale
# Divides by every position, padding included.
sum_loss = nn.CrossEntropyLoss(ignore_index=ignore_index, reduction="sum")
optimizer.zero_grad()
n_positions = 0
for step, (tokens, labels) in enumerate(loader):
    sum_loss(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)).backward()
    n_positions += labels.numel()
    if (step + 1) % accum_steps == 0:
        for p in model.parameters():
            p.grad /= n_positions
        optimizer.step()
        optimizer.zero_grad()
        n_positions = 0
