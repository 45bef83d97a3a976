"""The GPU memory watchdog's logic with a stand-in for NVML (the real one runs on the GPU
machine: `pytest -m gpu`)."""

import subprocess
import time
from types import SimpleNamespace

import pytest

from worker.gpu_watchdog import GpuMemoryWatchdog, load_nvml


class FakeNvml:
    """Two devices; the job's process grows its memory on device 1 over time."""

    def __init__(self, pid: int, growth_mb_per_poll: int) -> None:
        self.pid, self.growth, self.used = pid, growth_mb_per_poll << 20, 0

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        other = SimpleNamespace(pid=1, usedGpuMemory=50 << 30)  # someone else's: never counted
        if handle == 0:
            return [other]
        self.used += self.growth
        return [SimpleNamespace(pid=self.pid, usedGpuMemory=self.used)]


def test_a_job_over_its_gpu_budget_is_killed() -> None:
    job = subprocess.Popen(["sleep", "30"])
    nvml = FakeNvml(job.pid, growth_mb_per_poll=100)
    with GpuMemoryWatchdog(nvml, budget_mb=1000, job_pids=lambda: {job.pid}) as watchdog:
        job.wait(timeout=10)
    assert watchdog.exceeded and job.returncode == -9
    assert watchdog.peak > 1000 << 20


def test_a_job_within_its_budget_is_left_alone() -> None:
    job = subprocess.Popen(["sleep", "0.5"])
    nvml = FakeNvml(job.pid, growth_mb_per_poll=0)
    with GpuMemoryWatchdog(nvml, budget_mb=1000, job_pids=lambda: {job.pid}) as watchdog:
        job.wait(timeout=10)
        time.sleep(0.1)
    assert not watchdog.exceeded and job.returncode == 0


@pytest.mark.gpu
def test_nvml_sees_the_gpu() -> None:
    nvml = load_nvml()
    assert nvml is not None and nvml.nvmlDeviceGetCount() >= 1
