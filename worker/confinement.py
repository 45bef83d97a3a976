"""Kernel-level confinement added to bubblewrap: a seccomp filter (cgroups: `worker.cgroups`).

seccomp: the filter is compiled here, on trusted ground, with libseccomp (through pyseccomp's
ctypes binding) and handed to bwrap (`--seccomp FD`), which installs it right before it executes
the job, so it binds the harness and the learner's code alike and can never be lifted (seccomp
filters are inherited and irreversible). It denies, with EPERM, what no grading job needs and
what widens the kernel's attack surface: debugging other processes, namespaces and mounts, BPF,
keyrings, perf, module loading, io_uring, userfaultfd. Other architectures' syscall tables
(e.g. 32-bit int 0x80) kill the process: libseccomp's default for foreign architectures.
"""

import errno
import logging
import os
from functools import lru_cache

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
