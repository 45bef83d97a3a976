# expect: failed gradients_mismatch
# Cheat: keep every micro-batch's graph alive until one backward() per window, with the saved
# activations packed into float32 copies (half the memory, within the gradient tolerance).
import weakref

packed = {}  # one float32 copy per live tensor (tanh's output is saved twice)


def pack(t):
    if not t.is_floating_point() or t.numel() < 1024:
        return t
    if id(t) not in packed:
        packed[id(t)] = (t.to(torch.float32), t.dtype)
        weakref.finalize(t, packed.pop, id(t), None)
    return packed[id(t)]


def unpack(p):
    return p[0].to(p[1]) if isinstance(p, tuple) else p


losses = []
for step, (x, y) in enumerate(loader):
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        losses.append(loss_fn(model(x), y))
    if (step + 1) % accum_steps == 0:
        optimizer.zero_grad()
        torch.stack(losses).mean().backward()
        optimizer.step()
        losses = []
