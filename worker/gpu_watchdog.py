"""GPU memory watchdog: the kernel cannot cap GPU memory, so NVML is polled for what the job's
processes hold on the device and the job is killed when it goes over its budget.

NVML (`nvidia-ml-py`) reports processes by host pid; the job's pids come from its cgroup, which
lists host pids too. A job killed here is reported as `memory_limit`.
"""

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
POLL_S = 0.05


def watch_gpu_memory(
    use_gpu: bool, budget_mb: int, job_pids: Callable[[], set[int]]
) -> "GpuMemoryWatchdog | contextlib.nullcontext[None]":
    """A watchdog for a job that may use the GPU, or nothing where there is none to watch."""
    nvml = load_nvml() if use_gpu else None
    if nvml is None:
        return contextlib.nullcontext()
    return GpuMemoryWatchdog(nvml, budget_mb, job_pids)


def load_nvml() -> Any | None:
    """The initialised `pynvml` module, or None where there is no NVIDIA driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no library, no driver, no device
        log.warning("GPU memory watchdog off: %s", exc)
        return None
    return pynvml


class GpuMemoryWatchdog:
    """Kills every process of `job_pids()` once together they hold more than `budget_mb` of
    GPU memory. Use as a context manager around one job; `exceeded` says whether it fired."""

    def __init__(self, nvml: Any, budget_mb: int, job_pids: Callable[[], set[int]]) -> None:
        self.nvml = nvml
        self.budget = budget_mb << 20
        self.job_pids = job_pids
        self.exceeded = False
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "GpuMemoryWatchdog":
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def used_bytes(self, pids: set[int]) -> int:
        total = 0
        for index in range(self.nvml.nvmlDeviceGetCount()):
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            for process in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid in pids and process.usedGpuMemory is not None:
                    total += process.usedGpuMemory
        return total

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            pids = self.job_pids()
            if not pids:
                continue
            try:
                used = self.used_bytes(pids)
            except Exception:
                log.exception("NVML query failed")
                continue
            self.peak = max(self.peak, used)
            if used > self.budget:
                self.exceeded = True
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                return
