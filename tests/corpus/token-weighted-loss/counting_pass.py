# expect: failed wrong_loss_scale
# Counts the batches in a first pass over the loader, then trains with a window loss that is
# scaled uniformly wrong (divided by the micro-batch's tokens times accum_steps, summed).
# The counting pass must not shift which micro-batches the grader thinks each update used.
n_batches = sum(1 for _ in loader)
sum_loss = nn.CrossEntropyLoss(ignore_index=ignore_index, reduction="sum")
optimizer.zero_grad()
window = []
for step, (tokens, labels) in enumerate(loader):
    window.append((tokens, labels))
    if len(window) == accum_steps or step + 1 == n_batches:
        total = sum(int((lab != ignore_index).sum()) for _, lab in window)
        for tok, lab in window:
            loss = sum_loss(model(tok).reshape(-1, vocab_size), lab.reshape(-1)) / (2 * total)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        window = []
