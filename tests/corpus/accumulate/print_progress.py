# expect: passed
def train_one_epoch():
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        (loss / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            print(f"update {(step + 1) // accum_steps}: loss {loss.item():.4f}")


train_one_epoch()
