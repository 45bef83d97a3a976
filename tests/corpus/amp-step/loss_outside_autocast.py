# expect: passed
# Only the model runs under autocast; the loss is computed in float32 from its output.
from torch.nn.utils import clip_grad_norm_


def train_step(x, y):
    model.zero_grad()
    with torch.autocast(device_type, amp_dtype):
        out = model(x)
    loss = loss_fn(out.float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


losses = [train_step(x, y) for x, y in loader]
