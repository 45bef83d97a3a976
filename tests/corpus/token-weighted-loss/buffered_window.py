# expect: passed
sum_loss = nn.CrossEntropyLoss(ignore_index=ignore_index, reduction="sum")
window = []
for tokens, labels in loader:
    window.append((tokens, labels))
    if len(window) < accum_steps:
        continue
    total = sum(int((lab != ignore_index).sum()) for _, lab in window)
    optimizer.zero_grad()
    for tok, lab in window:
        loss = sum_loss(model(tok).reshape(-1, vocab_size), lab.reshape(-1)) / total
        loss.backward()
    optimizer.step()
    window = []
