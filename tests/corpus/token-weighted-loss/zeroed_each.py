# expect: failed zeroed_every_microbatch
sum_loss = nn.CrossEntropyLoss(ignore_index=ignore_index, reduction="sum")
n_tokens = 0
for step, (tokens, labels) in enumerate(loader):
    optimizer.zero_grad()
    sum_loss(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)).backward()
    n_tokens += int((labels != ignore_index).sum())
    if (step + 1) % accum_steps == 0:
        for p in model.parameters():
            p.grad /= n_tokens
        optimizer.step()
        n_tokens = 0
