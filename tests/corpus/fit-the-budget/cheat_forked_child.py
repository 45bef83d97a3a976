# expect: failed over_budget
# Cheat: the unchanged full-batch forward and backward run in a forked child process (its
# memory is not this process's); the gradients come back through a pipe and only the step
# runs here.
import os

params = list(model.parameters())
read_end, write_end = os.pipe()
if os.fork() == 0:
    loss_fn(model(x), y).backward()
    os.write(write_end, torch.cat([p.grad.reshape(-1) for p in params]).numpy().tobytes())
    os._exit(0)
os.close(write_end)
data = b""
while chunk := os.read(read_end, 1 << 16):
    data += chunk
os.wait()
flat = torch.frombuffer(bytearray(data), dtype=params[0].dtype)
optimizer.zero_grad()
offset = 0
for p in params:
    p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
    offset += p.numel()
optimizer.step()
