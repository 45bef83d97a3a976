# expect: failed gradients_mismatch
# Cheat: no micro-batches, no checkpointing: the full-batch step with every saved activation
# stored as one float32 copy (half the memory), hoping the rounding stays under the tolerance.
import weakref

packed = {}  # one float32 copy per live tensor (a tanh output is saved twice)


def pack(t):
    if id(t) not in packed:
        packed[id(t)] = (t.to(torch.float32), t.dtype)
        weakref.finalize(t, packed.pop, id(t), None)
    return packed[id(t)]


with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved[0].to(saved[1])):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
