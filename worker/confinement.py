"""Kernel-level confinement added to bubblewrap: a seccomp filter and a process-count cap.

seccomp: the filter is compiled here, on trusted ground, with libseccomp (through pyseccomp's
ctypes binding) and handed to bwrap (`--seccomp FD`), which installs it right before it executes
the job, so it binds the harness and the learner's code alike and can never be lifted (seccomp
filters are inherited and irreversible). It denies, with EPERM, what no grading job needs and
what widens the kernel's attack surface: debugging other processes, namespaces and mounts, BPF,
keyrings, perf, module loading, io_uring, userfaultfd. Other architectures' syscall tables
(e.g. 32-bit int 0x80) kill the process: libseccomp's default for foreign architectures.

Process count and memory: RLIMIT_NPROC is not enforced for root's processes and RLIMIT_DATA does
not count shared mappings or tmpfs pages, so each sandbox gets its own cgroups, `pids` and
`memory` (v1 or v2), where the kernel lets us create them; they also let the worker kill every
process of a job, however it tried to escape its process group, and tell an out-of-memory kill.
Without a cgroup hierarchy it may write to, the process count is not capped (RLIMIT_NPROC counts
every process of the host user, the worker's own included).
"""

import contextlib
import errno
import logging
import os
import signal
import time
import uuid
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_by_handle_at", "name_to_handle_at",
    "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "settimeofday",
    "clock_settime", "adjtimex", "sethostname", "setdomainname", "vhangup",
    # the new mount API
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    # System V IPC: it would outlive a job inside a warm pool slot (POSIX shm is /dev/shm, wiped)
    "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semctl", "semtimedop",
)  # fmt: skip
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
CLONE_NAMESPACE_FLAGS = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
    0x00000080,
)


@lru_cache(maxsize=1)
def seccomp_program() -> bytes:
    """The compiled BPF program (cached: it is the same for every job)."""
    import pyseccomp as seccomp

    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        try:
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except Exception:  # a syscall this architecture does not have
            log.debug("seccomp: no syscall %s here", name)
    # clone() may not create namespaces; clone3() passes its flags in memory a filter cannot
    # read, so it answers ENOSYS and libc falls back to clone().
    for flag in CLONE_NAMESPACE_FLAGS:  # one rule per flag: any of them denies the call
        rules.add_rule(
            seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag)
        )
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    read, write = os.pipe()
    with os.fdopen(write, "wb") as sink:
        rules.export_bpf(sink)
    with os.fdopen(read, "rb") as source:
        return source.read()


def seccomp_fd() -> int:
    """A readable fd holding the BPF program, for `bwrap --seccomp FD` (caller closes it)."""
    fd = os.memfd_create("gradlab-seccomp", 0)
    os.write(fd, seccomp_program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class JobCgroup:
    """One sandbox's cgroup(s): a cap on its processes and threads (`pids`) and, where the
    memory controller is ours to use, on all the memory it is charged for, shared mappings and
    tmpfs pages included (RLIMIT_DATA counts neither)."""

    V1 = Path("/sys/fs/cgroup")  # v1: one hierarchy per controller below it
    V2_ROOT = Path("/sys/fs/cgroup")

    def __init__(self, pids: Path, memory: Path | None) -> None:
        self.path = pids
        self.memory = memory

    @classmethod
    def create(cls, max_pids: int, memory_mb: int | None = None) -> "JobCgroup | None":
        """Fresh cgroups with these caps, or None where this process may not make them."""
        name = f"job-{uuid.uuid4().hex[:12]}"
        try:
            if (cls.V1 / "pids" / "cgroup.procs").exists():
                pids = cls.V1 / "pids" / "gradlab" / name
                pids.mkdir(parents=True)
                memory = _v1_memory_cgroup(name, memory_mb)
            elif "pids" in _v2_controllers(cls.V2_ROOT):
                parent = cls.V2_ROOT / "gradlab"
                parent.mkdir(exist_ok=True)
                wanted = "+pids +memory" if "memory" in _v2_controllers(cls.V2_ROOT) else "+pids"
                (parent / "cgroup.subtree_control").write_text(wanted)
                pids = parent / name
                pids.mkdir()
                memory = None
                if memory_mb and (pids / "memory.max").exists():
                    (pids / "memory.max").write_text(str(memory_mb << 20))
                    (pids / "memory.swap.max").write_text("0")
                    memory = pids
            else:
                return None
            (pids / "pids.max").write_text(str(max_pids))
        except OSError as exc:
            log.debug("no job cgroup: %s", exc)
            return None
        if memory_mb and memory is None:
            log.warning("no memory cgroup: shared memory is not counted against the job's limit")
        return cls(pids, memory)

    @classmethod
    def sweep(cls, older_than_s: float = 600.0) -> None:
        """Remove job cgroups left empty by workers that died. rmdir only succeeds on empty
        ones, and the age keeps it off a cgroup another worker has just made."""
        roots = [cls.V1 / "pids" / "gradlab", cls.V2_ROOT / "gradlab"]
        memory_root = _v1_memory_parent()
        if memory_root is not None:
            roots.append(memory_root)
        for root in roots:
            for stale in root.glob("job-*") if root.is_dir() else ():
                with contextlib.suppress(OSError):
                    if time.time() - stale.stat().st_mtime > older_than_s:
                        stale.rmdir()

    def pids(self) -> set[int]:
        with contextlib.suppress(OSError, ValueError):
            return {int(p) for p in (self.path / "cgroup.procs").read_text().split()}
        return set()

    def enter(self) -> None:
        """Move the calling process (a child between fork and exec) into these cgroups."""
        for path in {self.path, self.memory} - {None}:
            (path / "cgroup.procs").write_text(str(os.getpid()))  # type: ignore[operator]

    def memory_limit_hits(self) -> int:
        """How often this cgroup ran into its memory cap (v1 failcnt, v2 `max` events, plus
        out-of-memory kills): a job that hit it and then crashed or crawled past its wall
        clock ran out of memory."""
        if self.memory is None:
            return 0
        hits = 0
        with contextlib.suppress(OSError, ValueError):
            hits += int((self.memory / "memory.failcnt").read_text())  # v1
        for name in ("memory.events", "memory.oom_control"):  # v2, v1
            with contextlib.suppress(OSError):
                for line in (self.memory / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key in ("max", "oom_kill") and value.strip().isdigit():
                        hits += int(value)
        return hits

    def kill_all(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in the cgroup until it is empty (killed processes leave only
        once reaped, so this waits for that too)."""
        deadline = time.monotonic() + timeout_s
        while pids := [int(p) for p in (self.path / "cgroup.procs").read_text().split()]:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise OSError(f"{self.path}: processes {pids} survive SIGKILL")
            time.sleep(0.01)

    def remove(self) -> None:
        try:
            self.kill_all()
            for path in {self.path, self.memory} - {None}:
                path.rmdir()  # type: ignore[union-attr]
        except OSError:
            log.warning("could not remove %s", self.path)


def _v1_memory_parent() -> Path | None:
    """Our own v1 memory cgroup's `gradlab` folder (job cgroups nest under our cgroup)."""
    root = JobCgroup.V1 / "memory"
    if not (root / "cgroup.procs").exists():
        return None
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                return root / path.lstrip("/") / "gradlab"
    except (OSError, ValueError):
        return None
    return None


def _v1_memory_cgroup(name: str, memory_mb: int | None) -> Path | None:
    parent = _v1_memory_parent()
    if not memory_mb or parent is None:
        return None
    try:
        path = parent / name
        path.mkdir(parents=True)
        (path / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
        with contextlib.suppress(OSError):  # no swap accounting on many kernels
            (path / "memory.memsw.limit_in_bytes").write_text(str(memory_mb << 20))
    except OSError as exc:
        log.debug("no v1 memory cgroup: %s", exc)
        return None
    return path


def _v2_controllers(root: Path) -> list[str]:
    try:
        return (root / "cgroup.controllers").read_text().split()
    except OSError:
        return []
