# expect: failed gradients_mismatch
# Cheat: no micro-batches, no checkpointing: the full-batch step on a float32 copy of the model
# (half the activation memory), its gradients copied back onto the float64 parameters.
import copy

low = copy.deepcopy(model).float()
loss_fn(low(x.float()), y.float()).backward()
optimizer.zero_grad()
for p, q in zip(model.parameters(), low.parameters()):
    p.grad = q.grad.to(p.dtype)
optimizer.step()
