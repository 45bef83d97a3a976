# expect: failed over_budget
# Cheat: the unchanged full-batch step, bracketed by every "reset the peak" call at hand:
# torch.cuda's peak statistics and cache, a garbage collection and glibc's malloc_trim.
import contextlib
import ctypes
import gc


def reset():
    with contextlib.suppress(Exception):
        torch.cuda.reset_peak_memory_stats()
    with contextlib.suppress(Exception):
        torch.cuda.empty_cache()
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


reset()
optimizer.zero_grad()
loss = loss_fn(model(x), y)
reset()
loss.backward()
reset()
optimizer.step()
reset()
