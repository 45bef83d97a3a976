"""The warm pool's zygote: a long-lived process inside one sandbox slot that has imported torch
(CUDA never initialised here) and forks one child per job.

Protocol on the control socket (fd given as argv[1]): the zygote sends b"ready", forks a
**standby** child and announces it with a frame {"forked": pid}; the worker moves that child
into a fresh cgroup of its own while it waits, idle, for work (so neither the fork nor the move
is on a job's path). Per phase of a job, the worker sends the bytes b"job" with five fds
attached (one sendmsg, SCM_RIGHTS): stdout, stderr, observations, the read end of a pipe
carrying the phase itself (JSON {spec, phase, indices, code, limits}), and the phase's clock
socket. The zygote hands them to the standby over their private socket; only the standby
reads the phase; it sets its rlimits and runs the harness, everything it does charged to its
own cgroup. The zygote waits for it, kills every other process in the slot and wipes the
scratch areas, answers a frame {"status": waitpid status}, then forks the next standby and
announces it. Frames are a 4-byte big-endian length and a JSON object.

Security reasoning: the zygote runs as PID 1 of the slot's pid namespace (`bwrap --as-pid-1`),
so no job process can signal it (the kernel drops signals to a namespace's init that it has no
handler for, SIGKILL included) and kill(-1) from it reaches every other process of the slot. It
is not dumpable, and seccomp denies ptrace and process_vm_*, so a job cannot read or patch its
memory. It never runs learner code and never even reads it: a job arrives on a pipe only its own
child reads, so no later job (a fork of the zygote, with a copy of its memory) can find an
earlier learner's code in memory it inherited. It trusts nothing a child left behind: the next
job starts from a fresh fork, with /scratch, /tmp and /dev/shm emptied.
"""

import contextlib
import ctypes
import gc
import json
import os
import resource
import shutil
import socket
import struct
import sys
from typing import Any

SCRATCH_DIRS = ("/scratch", "/tmp", "/dev/shm")
PR_SET_DUMPABLE = 4
JOB_FRAME = b"job"
MAX_JOB = 4 << 20


def _mount_points() -> set[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        return {line.split()[4] for line in mounts}


def _wipe(path: str, mounts: set[str]) -> None:
    """Remove everything inside `path`, never following symlinks and leaving mounts alone (a
    runtime bound under /tmp, say, and the folders leading to it)."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.path in mounts:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                if any(mount.startswith(entry.path + "/") for mount in mounts):
                    _wipe(entry.path, mounts)
                else:
                    shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def _reap_all() -> None:
    """Kill every other process of the slot and reap them (we are its PID 1)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, 9)
    while True:
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _standby(handoff: socket.socket) -> None:
    """In the forked standby child: wait, idle, for a phase's fds, then become the phase. Never
    returns."""
    try:
        os.setsid()
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        _message, fds, _flags, _addr = socket.recv_fds(handoff, 16, 5)
        handoff.close()
        if len(fds) != 5:
            os._exit(70)
        stdout, stderr, obs, job, clock = fds
        with os.fdopen(job, "rb") as source:
            request: dict[str, Any] = json.loads(source.read(MAX_JOB))
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.close(stdout)
        os.close(stderr)
        limits = request["limits"]
        cpu = int(limits["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        data = int(limits["memory_mb"]) << 20
        resource.setrlimit(resource.RLIMIT_DATA, (data, data))
        os.chdir("/scratch")
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        from harness.context import Clock
        from harness.run import run_phase

        clock_socket = socket.socket(fileno=clock)
        run_phase(request, os.fdopen(obs, "wb", closefd=True), Clock(clock_socket))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    except BaseException:
        os._exit(70)


WARM_UP_CODE = """
for step, (x, y) in enumerate(loader):
    out = model(x)
    if "vocab_size" in globals():
        out, y = out.reshape(-1, vocab_size), y.reshape(-1)
    (loss_fn(out, y) / accum_steps).backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
"""
WARM_UP_SCENARIOS = [
    {"seed": 0, "accum_steps": 2, "microbatches": 2, "micro_batch_size": 2, "optimizer": "sgd"},
    {
        "seed": 0,
        "accum_steps": 2,
        "microbatches": 2,
        "micro_batch_size": 2,
        "optimizer": "adam",
        "model": "tokens",
    },
    {"seed": 0, "accum_steps": 2, "microbatches": 2, "micro_batch_size": 2, "model": "mlp_bn"},
]


def _warm_up() -> None:
    """Run a tiny phase once, here, so that every lazy import and first-use initialisation of
    torch (optimizers, autograd, DataLoader, safetensors) is paid before the first fork, not by
    every job. CPU only and single-threaded: forking after it stays safe."""
    import io

    from harness.context import LocalClock
    from harness.run import run_phase

    spec = {"harness": "accumulation", "device": "cpu", "scenarios": WARM_UP_SCENARIOS}
    request = {"spec": spec, "phase": "learner", "indices": [0, 1, 2], "code": WARM_UP_CODE}
    saved = sys.stdout
    sys.stdout = io.StringIO()
    try:
        run_phase(request, io.BytesIO(), LocalClock())
    finally:
        sys.stdout = saved
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        print(f"zygote: {threads} threads after warm-up; forking may be unsafe", file=sys.stderr)


def _send(control: socket.socket, answer: dict[str, Any]) -> None:
    encoded = json.dumps(answer).encode()
    control.sendall(struct.pack(">I", len(encoded)) + encoded)


def _fork_standby(control: socket.socket) -> tuple[int, socket.socket]:
    """A fresh standby child, announced to the worker; returns its pid and our end of the
    socket its phase's fds will travel on."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        control.close()
        ours.close()
        _standby(theirs)
    theirs.close()
    _send(control, {"forked": pid})
    return pid, ours


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    # Everything a job would import, loaded once here; CUDA stays uninitialised.
    import harness.run
    import numpy  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch
    import torch.utils.data

    for name in harness.run.exercise_names():
        harness.run.exercise_module(name)
    torch.set_num_threads(1)
    _warm_up()
    # Every object alive now is inherited by each forked phase: keep the garbage collector
    # off them, so that a collection in a phase does not touch (and copy) the pages they sit
    # on. Otherwise when a collection happens would add megabytes to a phase's memory peak.
    gc.freeze()
    mounts = _mount_points()  # fixed for the slot's life: a job cannot mount (seccomp)
    control.sendall(b"ready")
    pid, handoff = _fork_standby(control)
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, 16, 5)
        except OSError:
            return
        if not message:
            return  # the worker is gone: so are we (and, as PID 1, the whole slot)
        if message != JOB_FRAME or len(fds) != 5:
            return  # not our protocol: end the slot
        with contextlib.suppress(OSError):  # a standby that died just ends its phase early
            socket.send_fds(handoff, [JOB_FRAME], fds)
        handoff.close()
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        _reap_all()
        for path in SCRATCH_DIRS:
            _wipe(path, mounts)
        _send(control, {"status": status})
        pid, handoff = _fork_standby(control)


if __name__ == "__main__":
    main()
