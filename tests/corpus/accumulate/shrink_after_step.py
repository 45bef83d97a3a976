# expect: failed parameters_mismatch
# Right gradients, but the weights are shrunk by hand after every update (decay the optimizer
# does not know about): the parameters leave the full-batch path.
optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / accum_steps).backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.99)
