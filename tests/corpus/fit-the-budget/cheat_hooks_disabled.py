# expect: failed over_budget
# Cheat: the unchanged full-batch step, with every hook, torch dispatch mode and default
# saved-tensors hook switched off first, as if a meter inside the process did the measuring.
import torch.utils._python_dispatch as dispatch

for module in model.modules():
    module._forward_pre_hooks.clear()
    module._forward_hooks.clear()
    module._backward_hooks.clear()
torch.autograd.graph.disable_saved_tensors_hooks("no meters").__enter__()
with dispatch._disable_current_modes():
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
