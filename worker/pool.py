"""Sandbox slots: per slot, a long-lived sandbox whose zygote (`harness.zygote`) has already
imported torch and forks one child per phase of a job, so a phase costs a fork, not an
interpreter and an `import torch` (seconds).

Each slot is one bubblewrap sandbox with every protection of `worker.sandbox` (namespaces,
seccomp, read-only runtime, rlimits) plus `--as-pid-1` for its zygote, in a cgroup of its own.
The zygote keeps one idle standby child, which the worker moves into a fresh cgroup below the
slot's while no job waits for it; a phase is handed to that child, so the kernel keeps the
phase's memory peak and CPU time apart from everything else, and the worker reads them from
outside (`worker.cgroups`). After each phase the zygote kills everything else in
the slot and wipes its scratch areas. A slot whose phase timed out, whose zygote stopped
answering, or which broke the protocol in any way is killed whole and started afresh: nothing a
job did can reach the next job through a slot that could not be cleaned.

`WarmPool` keeps warm slots for a worker; `run_in_sandbox` (the cold path) starts a slot for one
job and stops it afterwards.
"""

import contextlib
import hashlib
import json
import logging
import os
import queue
import secrets
import select
import socket
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from gradlab.config import Settings
from worker.cgroups import Cgroup, roots
from worker.confinement import seccomp_fd
from worker.gpu_watchdog import watch_gpu_memory
from worker.harness.protocol import FrameError, frame, read_frame
from worker.jobs import Phase, PhaseRun, SandboxJob, SandboxRun, Stream, TimedBlock
from worker.sandbox import (
    SandboxUnavailable,
    bwrap_argv,
    drain,
    host_uid_for_sandbox,
    limit_resources,
)

log = logging.getLogger(__name__)
START_TIMEOUT_S = 120.0
FORK_TIMEOUT_S = 10.0
CLEANUP_GRACE_S = 1.0  # the zygote's reap and wipe after a phase
TRUSTED_PHASE_S = 120.0  # trusted phases do not spend the learner's wall clock
SETTLE_S = 0.05  # how long a phase may take to go to sleep after "done" (see PhaseClock)
MAX_ANSWER = 4096


class SlotBroken(RuntimeError):
    """The slot could not be started or stopped keeping the protocol."""


class PhaseClock:
    """The worker's side of a phase's go/done conversation (harness/protocol.py).

    At "ready" the phase is blocked reading its socket, so the kernel has charged every
    nanosecond it ran to its cgroup: the CPU time is read, and "go" carries a fresh nonce. At
    "done" (which carries the result) the phase waits for "ack"; once it sleeps, the CPU time is
    read again. The difference is the kernel's count of the CPU every process of the phase
    spent between the two, threads and children included; the wall time is kept too (CUDA work
    is not CPU time). Anything else on the socket ends the conversation as broken.
    """

    def __init__(self, sock: socket.socket, cgroup: Cgroup | None, pid: int | None, blocks: int):
        self.sock = sock
        self.cgroup = cgroup
        self.pid = pid
        self.blocks = blocks
        self.timed: list[TimedBlock] = []
        self.error: str | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "PhaseClock":
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._thread.join(timeout=5)
        self.sock.close()

    def _cpu_ns(self) -> int | None:
        return self.cgroup.cpu_ns() if self.cgroup is not None else None

    def _settle(self) -> None:
        """Wait (briefly) until the phase's process is off the CPU: the kernel charges a
        running task's time to its cgroup when it stops running."""
        if self.pid is None:
            return
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{self.pid}/stat", "rb") as stat:
                    state = stat.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                return
            if state != b"R":
                return
            time.sleep(0.0002)

    def _serve(self) -> None:
        try:
            self._converse()
        finally:
            if self.error is not None:  # the phase waiting on its socket must not hang
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)

    def _converse(self) -> None:
        try:
            while True:
                try:
                    header, _ = read_frame(self.sock)
                except FrameError:
                    return  # the phase ended (or closed its end): no more blocks
                tag = header.get("tag")
                if (
                    header.get("k") != "ready"
                    or len(self.timed) >= self.blocks
                    or isinstance(tag, bool)
                    or not isinstance(tag, int)
                ):
                    self.error = f"unexpected {str(header.get('k'))[:20]!r} frame"
                    return
                nonce = secrets.randbits(62)
                cpu_before, wall_before = self._cpu_ns(), time.monotonic_ns()
                self.sock.sendall(frame({"k": "go", "nonce": nonce}))
                header, result = read_frame(self.sock)
                wall = time.monotonic_ns() - wall_before
                if header.get("k") != "done":
                    self.error = "expected done"
                    return
                self._settle()
                cpu_after = self._cpu_ns()
                cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
                self.timed.append(TimedBlock(tag, nonce, result, cpu, wall))
                self.sock.sendall(frame({"k": "ack"}))
        except (FrameError, OSError) as exc:
            self.error = f"clock conversation broke: {exc}"[:200]


class Slot:
    def __init__(self, settings: Settings, use_gpu: bool, gpu_id: int | None = None) -> None:
        self.settings = settings
        self.use_gpu = use_gpu
        self.gpu_id = gpu_id
        self.process: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self.cgroup: Cgroup | None = None
        self._cache: dict[str, PhaseRun] = {}  # cacheable trusted phases, for this zygote
        self._inbox = b""  # bytes of the zygote's frames not read yet
        # the zygote's idle standby child, already in a fresh cgroup of its own (or no cgroup)
        self._standby: tuple[Cgroup | None, int | None] | None = None
        self._preparing: threading.Thread | None = None

    def start(self) -> None:
        ours, theirs = socket.socketpair()
        seccomp = seccomp_fd()
        self.cgroup = Cgroup.slot(
            max_pids=self.settings.max_processes, memory_mb=self.settings.slot_memory_mb
        )
        zygote = self.cgroup.at("zygote") if self.cgroup is not None else None
        argv = bwrap_argv(
            settings=self.settings,
            harness_args=["harness.zygote", str(theirs.fileno())],
            use_gpu=self.use_gpu,
            seccomp_fd=seccomp,
            as_pid_1=True,
            gpu_id=self.gpu_id,
        )
        host_uid = host_uid_for_sandbox(self.settings)
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=None,  # the zygote's own errors go to the worker's log
                pass_fds=(theirs.fileno(), seccomp),
                start_new_session=True,
                preexec_fn=lambda: limit_resources(
                    None, self.settings.slot_memory_mb, zygote, host_uid, self.settings.job_nice
                ),
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
        except OSError as exc:
            self.stop()
            raise SandboxUnavailable(f"cannot start {self.settings.bwrap_path!r}: {exc}") from exc
        finally:
            os.close(seccomp)
            theirs.close()
        self.control = ours
        ready, _, _ = select.select([ours], [], [], START_TIMEOUT_S)
        if not ready or ours.recv(5) != b"ready":
            self.stop()
            raise SlotBroken("the zygote did not start")
        self._cache.clear()  # a new zygote: trusted phases are measured again
        self._inbox = b""
        self._take_standby()

    def stop(self) -> None:
        """Kill the whole slot: bwrap, its pid namespace, and anything left in its cgroup."""
        if self._preparing is not None and self._preparing is not threading.current_thread():
            self._preparing.join()
        self._preparing = self._standby = None
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 9)
            self.process.wait()
        if self.control is not None:
            self.control.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        self.process = self.control = self.cgroup = None

    @property
    def running(self) -> bool:
        return self.control is not None

    def run(self, job: SandboxJob) -> SandboxRun:
        """Run the job's phases in order; stop early once the learner's time is spent or a
        phase broke the slot."""
        started = time.monotonic()
        runs: list[PhaseRun] = []
        caps = {"stdout": self.settings.max_output_bytes, "stderr": self.settings.max_output_bytes}
        for phase in job.phases:
            key = _cache_key(job, phase) if phase.cacheable else None
            if key is not None and key in self._cache:
                runs.append(self._cache[key])
                continue
            if self.control is None:
                self.start()
            # the learner's wall clock runs only while the learner's code does
            spent = sum(run.wall_s for run in runs if run.phase.learner)
            timeout = job.wall_s - spent if phase.learner else TRUSTED_PHASE_S
            run = self._run_phase(job, phase, max(timeout, 0.0), caps)
            runs.append(run)
            if phase.learner:
                for name in caps:
                    caps[name] = max(caps[name] - len(getattr(run, name).data), 0)
            elif run.returncode != 0:
                log.error("trusted phase %s exited %s: %s", phase.name, run.returncode,
                          run.stderr.data[-4000:].decode("utf-8", errors="replace"))  # fmt: skip
            if run.timed_out or run.memory_exceeded or self.control is None:
                break
            if key is not None and run.returncode == 0 and run.clock_error is None:
                self._cache[key] = run
        return SandboxRun(phases=runs, wall_s=time.monotonic() - started)

    def _run_phase(
        self, job: SandboxJob, phase: Phase, timeout_s: float, caps: dict[str, int]
    ) -> PhaseRun:
        assert self.control is not None
        request = json.dumps(
            {
                "spec": job.spec,
                "phase": phase.name,
                "indices": list(phase.scenarios),
                "code": job.code if phase.learner else phase.script,
                "limits": {"cpu_s": int(timeout_s) + 5, "memory_mb": job.memory_mb},
            }
        ).encode()
        cgroup, pid = self._claim_standby(job)
        pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, observations
        job_read, job_write = os.pipe()  # the phase itself, read only by the phase's process
        clock_ours, clock_theirs = socket.socketpair()
        theirs = [w for _, w in pipes] + [job_read, clock_theirs.fileno()]
        try:
            socket.send_fds(self.control, [b"job"], theirs)
        except OSError:
            for fd in (job_write, *(r for r, _ in pipes)):
                os.close(fd)
            clock_ours.close()
            self.stop()
            raise SlotBroken("the slot stopped taking jobs") from None
        finally:
            for fd in theirs[:-1]:
                os.close(fd)
            clock_theirs.close()
        streams = [Stream(), Stream(), Stream()]
        limits = [caps["stdout"], caps["stderr"], self.settings.max_observation_bytes]
        readers = [
            threading.Thread(target=drain, args=(r, cap, stream), daemon=True)
            for (r, _), cap, stream in zip(pipes, limits, streams, strict=True)
        ]
        for reader in readers:
            reader.start()
        run = PhaseRun(phase, None, streams[2], stdout=streams[0], stderr=streams[1])
        threading.Thread(target=_write_and_close, args=(job_write, request), daemon=True).start()
        started = time.monotonic()
        watchdog = watch_gpu_memory(
            self.use_gpu, self.settings.gpu_memory_mb, cgroup.procs if cgroup else set
        )
        with PhaseClock(clock_ours, cgroup, pid, phase.timed_blocks) as clock, watchdog:
            answer = self._frame(timeout_s + CLEANUP_GRACE_S)
            # the learner's time ends here: killing what is left (a fork bomb's thousand
            # processes on a loaded host) is the slot's cost, not the learner's
            run.wall_s = time.monotonic() - started
            if answer is None or not isinstance(answer.get("status"), int):
                answer = None
                self.stop()  # timed out or broke the protocol: nothing may reach the next job
        run.timed, run.clock_error = clock.timed, clock.error
        run.gpu_peak_bytes = getattr(watchdog, "peak", None)
        run.timed_out = answer is None and run.wall_s >= timeout_s
        if cgroup is not None:
            run.peak_bytes = cgroup.peak_bytes()
            run.memory_exceeded = cgroup.memory_limit_hits() > 0
            cgroup.remove()
        run.memory_exceeded |= bool(getattr(watchdog, "exceeded", False))
        status = answer.get("status") if answer else None
        if isinstance(status, int):
            run.returncode = (
                -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            )
        for reader in readers:
            reader.join(timeout=5)
        if self.control is not None:  # the next standby, off this job's path where it can be
            self._preparing = threading.Thread(target=self._take_standby, daemon=True)
            self._preparing.start()
        return run

    def _take_standby(self) -> None:
        """Read the zygote's "forked" and move that standby child into a fresh phase cgroup. It
        is idle, waiting for its phase's fds, so nothing it does escapes the new cgroup."""
        answer = self._frame(FORK_TIMEOUT_S)
        if answer is None or not isinstance(answer.get("forked"), int):
            log.error("the zygote announced no standby child: %s", answer)
            return  # self._standby stays None: the next phase stops the slot
        if self.cgroup is None:
            self._standby = (None, None)
            return
        pid = _host_pid(self.cgroup.at("zygote").procs(), answer["forked"])
        if pid is None:
            log.error("the standby child %s is not in the zygote's cgroup", answer["forked"])
            return
        try:
            cgroup = self.cgroup.child(
                f"phase-{uuid.uuid4().hex[:12]}", max_pids=self.settings.max_processes
            )
        except OSError:
            log.exception("could not make a phase cgroup")
            return
        try:
            cgroup.enter(pid)
        except OSError:
            log.exception("could not move the standby child into its cgroup")
            cgroup.remove()
            return
        self._standby = (cgroup, pid)

    def _claim_standby(self, job: SandboxJob) -> tuple[Cgroup | None, int | None]:
        """The standby for this phase, capped at the job's memory; SlotBroken if there is
        none (the slot is then killed and started afresh)."""
        if self._preparing is not None:
            self._preparing.join()
            self._preparing = None
        standby, self._standby = self._standby, None
        if standby is None:
            self.stop()
            raise SlotBroken("no standby child to run the phase")
        cgroup, pid = standby
        if cgroup is not None:
            try:
                cgroup.limit_memory(job.memory_mb)
            except OSError:
                cgroup.remove()
                self.stop()
                raise SlotBroken("could not cap the phase's memory") from None
        return cgroup, pid

    def _frame(self, timeout_s: float) -> dict[str, Any] | None:
        """The zygote's next frame, or None (timeout, closed, malformed)."""
        assert self.control is not None
        deadline = time.monotonic() + timeout_s
        while True:
            if len(self._inbox) >= 4:
                (size,) = struct.unpack(">I", self._inbox[:4])
                if size > MAX_ANSWER:
                    return None
                if len(self._inbox) >= 4 + size:
                    data, self._inbox = self._inbox[4 : 4 + size], self._inbox[4 + size :]
                    with contextlib.suppress(ValueError):
                        answer = json.loads(data)
                        return answer if isinstance(answer, dict) else None
                    return None
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.control], [], [], max(left, 0))
            if not ready:
                return None
            chunk = self.control.recv(4096)
            if not chunk:
                return None
            self._inbox += chunk


def _host_pid(candidates: set[int], inner_pid: int) -> int | None:
    """Which of `candidates` (host pids) is `inner_pid` in the sandbox's pid namespace: the last
    NSpid entry of /proc/<pid>/status. Only processes of the zygote's own cgroup are candidates,
    so a pid the zygote names can never point the worker at a process outside the slot."""
    for pid in candidates:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("NSpid:"):
                    nspids = line.split()[1:]
                    if len(nspids) > 1 and nspids[-1] == str(inner_pid):
                        return pid
    return None


def _cache_key(job: SandboxJob, phase: Phase) -> str:
    scenarios = [job.spec["scenarios"][i] for i in phase.scenarios]
    material = [
        job.spec["harness"],
        job.spec["device"],
        job.memory_mb,
        phase.name,
        phase.script,
        scenarios,
    ]
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _write_and_close(fd: int, data: bytes) -> None:
    """Hand the phase to its process; a process that never reads it just ends the write."""
    try:
        with os.fdopen(fd, "wb") as sink:
            sink.write(data)
    except OSError:
        pass


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
        if not roots():
            log.warning(
                "no cgroup hierarchy this worker may use: jobs are not capped per phase, and "
                "the exercises whose verdict needs the kernel's measurements (memory, CPU time) "
                "answer internal_error (docs/grading-integrity.md)"
            )
        Cgroup.sweep()
        for slot in self._free:
            slot.start()  # pre-warmed before the first job arrives
        threading.Thread(target=self._restarter, daemon=True).start()

    def run(self, *, settings: Settings, job: SandboxJob) -> SandboxRun:
        del settings  # fixed per slot when the pool was made
        with self._lock:
            while not self._free:
                self._lock.wait()
            slot = self._free.pop()
        try:
            return slot.run(job)
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


def run_in_sandbox(*, settings: Settings, job: SandboxJob) -> SandboxRun:
    """The cold path: a fresh slot for this one job, stopped afterwards."""
    gpu_id = settings.gpu_ids[0] if settings.gpu_ids else None
    slot = Slot(settings, job.use_gpu, gpu_id)
    slot.start()
    try:
        return slot.run(job)
    finally:
        slot.stop()
