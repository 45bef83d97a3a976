"""The sandbox around every job: bubblewrap's argv, the limits set before it starts, and the
draining of what comes out. `worker.pool` starts and drives sandboxes built from these.

Security reasoning, in order of the argv built below:
- new user, pid, net, ipc, uts and cgroup namespaces: the job sees no other process, no network
  (only its own loopback), and is uid/gid 65534 (nobody) with every capability dropped;
- the filesystem is empty but for read-only binds of the system libraries and the Python runtime
  (not the project, not the data dir), a fresh /proc, a minimal /dev, and tmpfs /tmp and /scratch
  that vanish with the namespace, so nothing a job writes outlives it or reaches another job;
- the job's inputs arrive on a pipe that only the job's own process reads (`worker.pool`);
- its environment is cleared and rebuilt from a fixed list;
- --die-with-parent and --new-session: the job dies with the worker and cannot reach the
  worker's terminal; the whole process group is killed at the wall-clock limit;
- observations come back over a pipe, capped in size, and are parsed as safetensors only.
"""

import os
import resource
import sys
import sysconfig
from pathlib import Path

from gradlab.config import Settings
from worker.cgroups import Cgroup
from worker.jobs import Stream

HARNESS_DIR = Path(__file__).resolve().parent / "harness"
SANDBOX_UID = 65534  # nobody


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here (a platform fault)."""


def gpu_device_nodes() -> list[str]:
    return sorted(str(p) for p in Path("/dev").glob("nvidia*") if not p.is_dir()) + (
        ["/dev/nvidia-caps"] if Path("/dev/nvidia-caps").is_dir() else []
    )


def _python_roots() -> list[str]:
    """Directories the interpreter and its packages live in (bound read-only)."""
    candidates = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sysconfig.get_path("purelib"),
        sysconfig.get_path("platlib"),
        str(Path(sys.executable).resolve().parent.parent),
    }
    roots = sorted(p for p in candidates if p and Path(p).exists())
    # drop roots nested in another root
    return [p for p in roots if not any(p != q and p.startswith(q + os.sep) for q in roots)]


ISOLATION = (
    "--unshare-user --unshare-pid --unshare-net --unshare-ipc --unshare-uts --unshare-cgroup-try "
    f"--uid {SANDBOX_UID} --gid {SANDBOX_UID} --hostname sandbox "
    "--die-with-parent --new-session --cap-drop ALL --clearenv"
).split()
# The sandbox's own filesystems come first: binds listed after them may land inside them (a
# runtime under /tmp, say), while a tmpfs mounted later would hide an earlier bind. Scratch space
# is capped in size (it lives in memory).
SCRATCH_BYTES = str(256 << 20)
PRIVATE_MOUNTS = [
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--size",
    SCRATCH_BYTES,
    "--tmpfs",
    "/tmp",
    "--size",
    SCRATCH_BYTES,
    "--tmpfs",
    "/scratch",
    "--size",
    SCRATCH_BYTES,
    "--tmpfs",
    "/dev/shm",
]
# Kernel interfaces under /proc that a process mapped onto a privileged host user could write
# (sysctls: kernel.core_pattern runs a command as root on a crash) or should not read; the same
# lists as Docker's default: read-only, or hidden behind an empty, read-only directory or file.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
PROC_HIDDEN = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
)


def bwrap_argv(
    *,
    settings: Settings,
    harness_args: list[str],
    use_gpu: bool,
    seccomp_fd: int | None = None,
    as_pid_1: bool = False,
    gpu_id: int | None = None,
) -> list[str]:
    """bwrap's argv around `python -m harness...` (the zygote runs as the namespace's PID 1
    with `as_pid_1`)."""
    argv = [settings.bwrap_path, *ISOLATION, *PRIVATE_MOUNTS, "--ro-bind", "/usr", "/usr"]
    for path in PROC_READ_ONLY:
        if Path(path).exists():
            argv += ["--ro-bind", path, path]
    for path in PROC_HIDDEN:
        if Path(path).is_dir():
            argv += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
        elif Path(path).exists():
            argv += ["--ro-bind", "/dev/null", path]
    if as_pid_1:
        argv.append("--as-pid-1")
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    for top in ("bin", "lib", "lib64", "lib32", "sbin"):
        path = Path("/") / top
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    for etc_file in ("/etc/ld.so.cache", "/etc/localtime"):
        if Path(etc_file).exists():
            argv += ["--ro-bind", etc_file, etc_file]
    for root in _python_roots():
        argv += ["--ro-bind", root, root]
    argv += ["--ro-bind", str(HARNESS_DIR), "/gradlab/harness"]
    argv += ["--chdir", "/scratch"]
    if use_gpu:
        for node in gpu_device_nodes():
            argv += ["--dev-bind", node, node]
        for driver_dir in ("/usr/local/nvidia", "/usr/local/cuda"):
            if Path(driver_dir).is_dir():
                argv += ["--ro-bind", driver_dir, driver_dir]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/scratch",
        "TMPDIR": "/tmp",
        "PYTHONPATH": "/gradlab",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "LANG": "C.UTF-8",
        # Every allocation of 16 KiB or more (a tensor's storage) gets pages of its own and
        # gives them back when freed, so the kernel's memory peak of a job follows its live
        # tensors instead of the heap's history (glibc would otherwise raise this threshold
        # as it goes and keep freed tensors in the heap).
        "MALLOC_MMAP_THRESHOLD_": "16384",
    }
    if use_gpu and Path("/usr/local/nvidia/lib64").is_dir():
        env["LD_LIBRARY_PATH"] = "/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
    if use_gpu and gpu_id is not None:  # this slot's GPU (CUDA index in PCI bus order)
        env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(gpu_id))
    for key, value in env.items():
        argv += ["--setenv", key, value]
    # Last: the sandbox's root (a tmpfs holding the mount points) becomes read-only, so a job
    # can write nothing but /tmp, /scratch and /dev/shm, which are wiped or die with it.
    argv += ["--remount-ro", "/"]
    argv += ["--", sys.executable, "-s", "-B", "-m", *harness_args]
    return argv


def host_uid_for_sandbox(settings: Settings) -> int | None:
    """The unprivileged host uid to run bubblewrap as, when the worker runs as root.

    Inside, the job is uid nobody either way, but the kernel checks host objects against the
    host uid it maps to: run by root, bwrap maps the sandbox onto host root, and every
    root-owned file the sandbox can see is then writable by DAC (read-only mounts and the /proc
    masks above close the known ones). Run by an unprivileged host user it maps onto that user
    instead. That needs the Python runtime to be reachable by that user: a runtime under /root
    (pyenv, say) is not, and then bwrap stays root and a warning says so.
    """
    if os.geteuid() != 0 or settings.sandbox_host_uid is None:
        return None
    for root in [*_python_roots(), str(HARNESS_DIR)]:
        parts = Path(root).parts
        for depth in range(1, len(parts) + 1):
            if not os.stat(Path(*parts[:depth])).st_mode & 0o001:  # others may not traverse
                return None
    return settings.sandbox_host_uid


def limit_resources(
    cpu_s: int | None,
    memory_mb: int,
    cgroup: Cgroup | None,
    host_uid: int | None = None,
    nice: int = 0,
) -> None:
    """Runs in the child between fork and exec: the cgroup, rlimits, niceness and the host uid
    apply to bwrap and everything the sandbox starts."""
    if cgroup is not None:
        cgroup.enter()
    if nice:
        # Learner code is batch work: on a host it shares with the web process (`gradlab
        # serve --workers N`), requests get the CPU first. The verdicts do not move: the
        # kernel's CPU time of a phase is the same at any niceness, and trusted and learner
        # phases run at the same one. Only raising it (lower priority) needs no privilege,
        # and the sandbox can never lower it again.
        os.nice(nice)
    if cpu_s is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    # RLIMIT_DATA, not RLIMIT_AS: the address-space limit breaks CUDA initialisation.
    resource.setrlimit(resource.RLIMIT_DATA, (memory_mb << 20, memory_mb << 20))
    if host_uid is not None:
        os.setgroups([])
        os.setresgid(host_uid, host_uid, host_uid)
        os.setresuid(host_uid, host_uid, host_uid)


def drain(fd: int, cap: int, into: Stream) -> None:
    """Keep the first `cap` bytes, read and count the rest so the writer never blocks."""
    chunks, kept = [], 0
    with os.fdopen(fd, "rb", buffering=0) as f:
        while chunk := f.read(65536):
            into.total += len(chunk)
            if kept < cap:
                chunks.append(chunk[: cap - kept])
                kept += len(chunks[-1])
    into.data = b"".join(chunks)
