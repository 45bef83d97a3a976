"""Kernel-level confinement added to bubblewrap: a seccomp filter and a process-count cap.

seccomp: the filter is compiled here, on trusted ground, with libseccomp (through pyseccomp's
ctypes binding) and handed to bwrap (`--seccomp FD`), which installs it right before it executes
the job, so it binds the harness and the learner's code alike and can never be lifted (seccomp
filters are inherited and irreversible). It denies, with EPERM, what no grading job needs and
what widens the kernel's attack surface: debugging other processes, namespaces and mounts, BPF,
keyrings, perf, module loading, io_uring, userfaultfd. Other architectures' syscall tables
(e.g. 32-bit int 0x80) kill the process: libseccomp's default for foreign architectures.

Process count: RLIMIT_NPROC is not enforced for root's processes, and the worker often runs as
root, so each job gets its own cgroup with the `pids` controller (v1 or v2) where the kernel
lets us create one; the cgroup also lets the worker kill every process of a job, however it
tried to escape its process group. Without a cgroup hierarchy it may write to, the process count
is not capped (RLIMIT_NPROC counts every process of the host user, the worker's own included).
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


class PidsCgroup:
    """One job's cgroup with a cap on the number of its processes and threads."""

    V1_ROOT = Path("/sys/fs/cgroup/pids")
    V2_ROOT = Path("/sys/fs/cgroup")

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_pids: int) -> "PidsCgroup | None":
        """A fresh cgroup capped at `max_pids`, or None where this process may not make one."""
        name = f"job-{uuid.uuid4().hex[:12]}"
        try:
            if (cls.V1_ROOT / "cgroup.procs").exists():
                path = cls.V1_ROOT / "gradlab" / name
                path.mkdir(parents=True)
            elif "pids" in _v2_controllers(cls.V2_ROOT):
                parent = cls.V2_ROOT / "gradlab"
                parent.mkdir(exist_ok=True)
                (parent / "cgroup.subtree_control").write_text("+pids")
                path = parent / name
                path.mkdir()
            else:
                return None
            (path / "pids.max").write_text(str(max_pids))
        except OSError as exc:
            log.debug("no pids cgroup: %s", exc)
            return None
        return cls(path)

    @classmethod
    def sweep(cls, older_than_s: float = 600.0) -> None:
        """Remove job cgroups left empty by workers that died. rmdir only succeeds on empty
        ones, and the age keeps it off a cgroup another worker has just made."""
        for root in (cls.V1_ROOT / "gradlab", cls.V2_ROOT / "gradlab"):
            for stale in root.glob("job-*") if root.is_dir() else ():
                with contextlib.suppress(OSError):
                    if time.time() - stale.stat().st_mtime > older_than_s:
                        stale.rmdir()

    def enter(self) -> None:
        """Move the calling process (a child between fork and exec) into this cgroup."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

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
            self.path.rmdir()
        except OSError:
            log.warning("could not remove %s", self.path)


def _v2_controllers(root: Path) -> list[str]:
    try:
        return (root / "cgroup.controllers").read_text().split()
    except OSError:
        return []
