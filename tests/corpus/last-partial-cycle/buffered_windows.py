# expect: passed
window = []
batches = list(loader)
for i in range(0, len(batches), accum_steps):
    window = batches[i : i + accum_steps]
    optimizer.zero_grad()
    for x, y in window:
        (loss_fn(model(x), y) / len(window)).backward()
    optimizer.step()
