# expect: failed wrong_loss_scale
sum_loss = nn.CrossEntropyLoss(ignore_index=ignore_index, reduction="sum")
optimizer.zero_grad()
for step, (tokens, labels) in enumerate(loader):
    sum_loss(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)).backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
