"""The warm pool: per worker slot, a long-lived sandbox whose zygote (`harness.zygote`) has
already imported torch and forks one child per job, so a job costs a fork, not an interpreter
and a `import torch` (seconds).

Each slot is one bubblewrap sandbox with every protection of the cold path (namespaces, seccomp,
read-only runtime, its own pids cgroup, rlimits) plus `--as-pid-1` for its zygote. After each job
the zygote kills everything else in the slot and wipes its scratch areas. A slot whose job timed
out, whose zygote stopped answering, or which broke the protocol in any way is killed whole and
started afresh: nothing a job did can reach the next job through a slot that could not be
cleaned.
"""

import json
import logging
import os
import queue
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from typing import Any

from gradlab.config import Settings
from worker.confinement import JobCgroup, seccomp_fd
from worker.gpu_watchdog import watch_gpu_memory
from worker.sandbox import (
    SandboxRun,
    Stream,
    bwrap_argv,
    drain,
    host_uid_for_sandbox,
    limit_resources,
)

log = logging.getLogger(__name__)
START_TIMEOUT_S = 120.0
CLEANUP_GRACE_S = 1.0  # the zygote's reap and wipe after a job
MAX_ANSWER = 4096


class SlotBroken(RuntimeError):
    """The slot could not be started or stopped keeping the protocol."""


class Slot:
    def __init__(self, settings: Settings, use_gpu: bool, gpu_id: int | None = None) -> None:
        self.settings = settings
        self.use_gpu = use_gpu
        self.gpu_id = gpu_id
        self.process: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self.cgroup: JobCgroup | None = None

    def start(self) -> None:
        ours, theirs = socket.socketpair()
        seccomp = seccomp_fd()
        self.cgroup = JobCgroup.create(self.settings.max_processes, self.settings.slot_memory_mb)
        argv = bwrap_argv(
            settings=self.settings,
            harness_args=["harness.zygote", str(theirs.fileno())],
            use_gpu=self.use_gpu,
            seccomp_fd=seccomp,
            as_pid_1=True,
            gpu_id=self.gpu_id,
        )
        cgroup, host_uid = self.cgroup, host_uid_for_sandbox(self.settings)
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None,  # the zygote's own errors go to the worker's log
            pass_fds=(theirs.fileno(), seccomp),
            start_new_session=True,
            preexec_fn=lambda: limit_resources(
                None, self.settings.slot_memory_mb, cgroup, host_uid
            ),
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        os.close(seccomp)
        theirs.close()
        self.control = ours
        ready, _, _ = select.select([ours], [], [], START_TIMEOUT_S)
        if not ready or ours.recv(5) != b"ready":
            self.stop()
            raise SlotBroken("the zygote did not start")

    def stop(self) -> None:
        """Kill the whole slot: bwrap, its pid namespace, and anything left in its cgroup."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.control is not None:
            self.control.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        self.process = self.control = self.cgroup = None

    @property
    def running(self) -> bool:
        return self.control is not None

    def run(self, *, spec_json: str, code: str, wall_s: float, memory_mb: int) -> SandboxRun:
        if self.control is None:
            self.start()
        assert self.control is not None
        request = json.dumps(
            {
                "spec": json.loads(spec_json),
                "code": code,
                "limits": {"cpu_s": int(wall_s) + 5, "memory_mb": memory_mb},
            }
        ).encode()
        pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, observations
        job_read, job_write = os.pipe()  # the job itself, read only by the job's own process
        streams = [Stream(), Stream(), Stream()]
        caps = [self.settings.max_output_bytes] * 2 + [self.settings.max_observation_bytes]
        cgroup = self.cgroup
        memory_hits = cgroup.memory_limit_hits() if cgroup else 0
        started = time.monotonic()
        try:
            socket.send_fds(self.control, [b"job"], [w for _, w in pipes] + [job_read])
        except OSError:
            for fd in (job_read, job_write, *(fd for pair in pipes for fd in pair)):
                os.close(fd)
            self.stop()
            raise SlotBroken("the slot stopped taking jobs") from None
        os.close(job_read)
        threading.Thread(target=_write_and_close, args=(job_write, request), daemon=True).start()
        for _, w in pipes:
            os.close(w)
        readers = [
            threading.Thread(target=drain, args=(r, cap, stream), daemon=True)
            for (r, _), cap, stream in zip(pipes, caps, streams, strict=True)
        ]
        for reader in readers:
            reader.start()
        watchdog = watch_gpu_memory(
            self.use_gpu, self.settings.gpu_memory_mb, cgroup.pids if cgroup else set
        )
        with watchdog:
            answer = self._answer(wall_s + CLEANUP_GRACE_S)
        memory_exceeded = cgroup is not None and cgroup.memory_limit_hits() > memory_hits
        memory_exceeded |= bool(getattr(watchdog, "exceeded", False))
        timed_out = answer is None and time.monotonic() - started >= wall_s
        if answer is None:
            self.stop()  # timed out or broke the protocol: nothing of it may reach the next job
        for reader in readers:
            reader.join(timeout=5)
        status = answer.get("status") if answer else None
        return SandboxRun(
            returncode=_returncode(status) if isinstance(status, int) else None,
            stdout=streams[0],
            stderr=streams[1],
            observations=streams[2],
            timed_out=timed_out,
            wall_s=time.monotonic() - started,
            memory_exceeded=memory_exceeded,
        )

    def _answer(self, timeout_s: float) -> dict[str, Any] | None:
        assert self.control is not None
        deadline = time.monotonic() + timeout_s
        data = b""
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.control], [], [], max(left, 0))
            if not ready:
                return None
            chunk = self.control.recv(MAX_ANSWER)
            if not chunk:
                return None
            data += chunk
            if len(data) >= 4:
                (size,) = struct.unpack(">I", data[:4])
                if size > MAX_ANSWER:
                    return None
                if len(data) >= 4 + size:
                    try:
                        answer = json.loads(data[4 : 4 + size])
                    except ValueError:
                        return None
                    return answer if isinstance(answer, dict) else None


def _write_and_close(fd: int, data: bytes) -> None:
    """Hand the job to its process; a job that never reads it just ends the write."""
    try:
        with os.fdopen(fd, "wb") as sink:
            sink.write(data)
    except OSError:
        pass


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


class WarmPool:
    """A worker's slots. Jobs run one at a time per slot; `run` matches `run_in_sandbox`."""

    def __init__(self, settings: Settings, slots: int = 1, use_gpu: bool = False) -> None:
        self.settings = settings
        gpu_ids = settings.gpu_ids or [None]  # type: ignore[list-item]
        self._free: list[Slot] = [
            Slot(settings, use_gpu, gpu_ids[index % len(gpu_ids)]) for index in range(slots)
        ]
        self._lock = threading.Condition()
        self._broken: queue.Queue[Slot | None] = queue.Queue()
        JobCgroup.sweep()
        for slot in self._free:
            slot.start()  # pre-warmed before the first job arrives
        threading.Thread(target=self._restarter, daemon=True).start()

    def run(
        self,
        *,
        settings: Settings,
        spec_json: str,
        code: str,
        wall_s: float,
        memory_mb: int,
        use_gpu: bool,
    ) -> SandboxRun:
        del settings, use_gpu  # fixed per slot when the pool was made
        with self._lock:
            while not self._free:
                self._lock.wait()
            slot = self._free.pop()
        try:
            return slot.run(spec_json=spec_json, code=code, wall_s=wall_s, memory_mb=memory_mb)
        finally:
            if slot.running:
                self._release(slot)
            else:  # a fresh sandbox replaces the one that was killed, off the job's clock
                self._broken.put(slot)

    def _restarter(self) -> None:
        """Starts replacement slots. One long-lived thread: bwrap's --die-with-parent is tied
        to the thread that started it (PR_SET_PDEATHSIG), so a short-lived thread would take
        the new sandbox down with it when it ends."""
        while (slot := self._broken.get()) is not None:
            try:
                slot.start()
            except Exception:
                log.exception("restarting a sandbox slot failed; it starts with its next job")
            self._release(slot)

    def _release(self, slot: Slot) -> None:
        with self._lock:
            self._free.append(slot)
            self._lock.notify()

    def close(self) -> None:
        self._broken.put(None)
        with self._lock:
            for slot in self._free:
                slot.stop()
