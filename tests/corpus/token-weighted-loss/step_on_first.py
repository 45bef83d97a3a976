# expect: failed step_off_by_one
# Steps when step % accum_steps == 0 (skipping step 0) and once more at the end: the same number
# of updates, but the first window takes one micro-batch too many.
sum_loss = nn.CrossEntropyLoss(ignore_index=ignore_index, reduction="sum")
n = len(loader)
optimizer.zero_grad()
n_tokens = 0
for step, (tokens, labels) in enumerate(loader):
    sum_loss(model(tokens).reshape(-1, vocab_size), labels.reshape(-1)).backward()
    n_tokens += int((labels != ignore_index).sum())
    if (step > 0 and step % accum_steps == 0) or step + 1 == n:
        for p in model.parameters():
            p.grad /= n_tokens
        optimizer.step()
        optimizer.zero_grad()
        n_tokens = 0
