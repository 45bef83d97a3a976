# expect: failed microbatches_not_used
# Cheat: compute each window's full-batch gradient in a forked child process (its memory is not
# this process's), send it back through a pipe, and only step here.
import os

batches = list(loader)
params = list(model.parameters())
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        model.zero_grad(set_to_none=True)
        out = model(torch.cat([x for x, _ in window]))
        loss_fn(out, torch.cat([y for _, y in window])).backward()
        os.write(write_end, torch.cat([p.grad.reshape(-1) for p in params]).numpy().tobytes())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 1 << 16):
        data += chunk
    os.close(read_end)
    os.wait()
    flat = torch.frombuffer(bytearray(data), dtype=params[0].dtype)
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    optimizer.step()
