"""Run one job's harness inside bubblewrap, with limits, and collect what it left behind.

Security reasoning, in order of the argv built below:
- new user, pid, net, ipc, uts and cgroup namespaces: the job sees no other process, no network
  (only its own loopback), and is uid/gid 65534 (nobody) with every capability dropped;
- the filesystem is empty but for read-only binds of the system libraries and the Python runtime
  (not the project, not the data dir), a fresh /proc, a minimal /dev, and tmpfs /tmp and /scratch
  that vanish with the namespace, so nothing a job writes outlives it or reaches another job;
- the job's inputs are bound read-only from a private temp dir the trusted side wrote;
- its environment is cleared and rebuilt from a fixed list;
- --die-with-parent and --new-session: the job dies with the worker and cannot reach the
  worker's terminal; the whole process group is killed at the wall-clock limit;
- observations come back over a pipe, capped in size, and are parsed as safetensors only.
"""

import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gradlab.config import Settings
from worker.confinement import JobCgroup, seccomp_fd
from worker.gpu_watchdog import watch_gpu_memory

log = logging.getLogger(__name__)
HARNESS_DIR = Path(__file__).resolve().parent / "harness"
SANDBOX_UID = 65534  # nobody


@dataclass
class Stream:
    data: bytes = b""
    total: int = 0

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)


@dataclass
class SandboxRun:
    returncode: int | None
    stdout: Stream
    stderr: Stream
    observations: Stream
    timed_out: bool
    wall_s: float
    memory_exceeded: bool = False  # the kernel killed a process of it over its memory cgroup


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
    job_dir: Path | None = None,
    as_pid_1: bool = False,
    gpu_id: int | None = None,
) -> list[str]:
    """bwrap's argv around `python -m harness...`: the cold path binds the job's inputs
    (`job_dir`), the warm pool's zygote runs as the namespace's PID 1 (`as_pid_1`)."""
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
    if job_dir is not None:
        argv += ["--ro-bind", str(job_dir), "/gradlab/job"]
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
    cpu_s: int | None, memory_mb: int, cgroup: JobCgroup | None, host_uid: int | None = None
) -> None:
    """Runs in the child between fork and exec: the cgroup, rlimits and the host uid apply to
    bwrap and everything the sandbox starts."""
    if cgroup is not None:
        cgroup.enter()
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


def run_in_sandbox(
    *,
    settings: Settings,
    spec_json: str,
    code: str,
    wall_s: float,
    memory_mb: int,
    use_gpu: bool,
) -> SandboxRun:
    if shutil.which(settings.bwrap_path) is None:
        raise SandboxUnavailable(
            f"{settings.bwrap_path!r} not found: install bubblewrap (apt-get install bubblewrap)"
        )
    with tempfile.TemporaryDirectory(prefix="gradlab-job-") as tmp:
        job_dir = Path(tmp)
        (job_dir / "spec.json").write_text(spec_json, encoding="utf-8")
        (job_dir / "submission.py").write_text(code, encoding="utf-8")
        os.chmod(job_dir, 0o755)
        for name in ("spec.json", "submission.py"):
            os.chmod(job_dir / name, 0o644)
        return _run(settings, job_dir, wall_s, memory_mb, use_gpu)


def _run(
    settings: Settings, job_dir: Path, wall_s: float, memory_mb: int, use_gpu: bool
) -> SandboxRun:
    obs_read, obs_write = os.pipe()
    seccomp = seccomp_fd()
    host_uid = host_uid_for_sandbox(settings)
    cgroup = JobCgroup.create(settings.max_processes, memory_mb)
    if cgroup is None:
        log.warning("no pids cgroup available: the job's process count is not capped")
    argv = bwrap_argv(
        settings=settings,
        harness_args=["harness.run", str(obs_write)],
        use_gpu=use_gpu,
        seccomp_fd=seccomp,
        job_dir=job_dir,
    )
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(obs_write, seccomp),
        start_new_session=True,
        preexec_fn=lambda: limit_resources(int(wall_s) + 5, memory_mb, cgroup, host_uid),
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    os.close(seccomp)
    os.close(obs_write)
    streams = {"stdout": Stream(), "stderr": Stream(), "observations": Stream()}
    assert process.stdout is not None and process.stderr is not None
    readers = [
        threading.Thread(target=drain, args=(fd, cap, streams[name]), daemon=True)
        for name, fd, cap in (
            ("stdout", os.dup(process.stdout.fileno()), settings.max_output_bytes),
            ("stderr", os.dup(process.stderr.fileno()), settings.max_output_bytes),
            ("observations", obs_read, settings.max_observation_bytes),
        )
    ]
    process.stdout.close()
    process.stderr.close()
    for reader in readers:
        reader.start()
    timed_out = False
    watchdog = watch_gpu_memory(use_gpu, settings.gpu_memory_mb, cgroup.pids if cgroup else set)
    try:
        with watchdog:
            process.wait(timeout=wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        # Kill bwrap's group (still unreaped, so the pgid cannot have been reused); the pid
        # namespace dies with bwrap, taking every process of the job with it.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    memory_exceeded = cgroup is not None and cgroup.memory_limit_hits() > 0
    memory_exceeded |= bool(getattr(watchdog, "exceeded", False))
    if cgroup is not None:
        cgroup.remove()  # whatever the job left running (a setsid daemon...) dies here
    for reader in readers:
        reader.join(timeout=5)
    return SandboxRun(
        returncode=process.returncode,
        stdout=streams["stdout"],
        stderr=streams["stderr"],
        observations=streams["observations"],
        timed_out=timed_out,
        wall_s=time.monotonic() - started,
        memory_exceeded=memory_exceeded,
    )
