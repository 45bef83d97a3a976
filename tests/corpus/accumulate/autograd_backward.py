# expect: passed
import itertools

it = iter(loader)
while chunk := list(itertools.islice(it, accum_steps)):
    optimizer.zero_grad()
    for x, y in chunk:
        torch.autograd.backward(loss_fn(model(x), y) / accum_steps)
    optimizer.step()
