"""Hostile learner code against the real sandbox, one attack (or a few cheap probes) per job.

Every attack is a submission graded through `worker.grading.grade`, exactly as the worker does:
in a fresh sandbox per job (`run_in_sandbox`, grade()'s default), and, for the probe and the
attacks that target what a slot keeps between jobs, in the warm pool (`WarmPool.run`, the
worker's default). After every job (`attack()` below) the battery checks, whatever the attack was:

1. the result is not `passed`, and no secret of the worker (its environment, the app database)
   appears in what the job printed;
2. the host is unchanged: no file named after this run's token anywhere the job tried to write,
   the app database and a victim file byte for byte the same, a host process still alive;
3. nothing outlives the job: no process carrying this run's marker (its name, set with prctl, or
   its command line), and no pids cgroup left but those of the pool's live slots;

and each test asserts what its attack must end in (`timeout`, `runtime_error`, `memory_limit`,
truncated output...). Holes that production code still has are `xfail(strict=True)` with the
reason; everything else passes. The last test grades the canonical solution on the same settings:
the worker still grades correctly after the whole battery.
"""

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyseccomp
import pytest

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import Content
from gradlab.results import GradeResult
from worker.cgroups import Cgroup, roots
from worker.grading import grade
from worker.jobs import SandboxJob, SandboxRun
from worker.pool import CLEANUP_GRACE_S, WarmPool, run_in_sandbox
from worker.sandbox import HARNESS_DIR

pytestmark = pytest.mark.slow

EXERCISE = "gradient-accumulation/accumulate"
CANONICAL = PROJECT_ROOT / "tests" / "corpus" / "accumulate" / "canonical.py"
MAX_WALL_S = 10.0
POOL_SLOTS = 1
MEMORY_MB = 4096  # the exercise's limit (lessons/gradient-accumulation/lesson.yaml)
TOKEN = uuid.uuid4().hex[:10]
MARK = f"gl{TOKEN}"  # name (prctl, <= 15 chars) or argv[0] of every process an attack starts
PLAIN_SLEEP = b"sleep\x008123.25\x00"  # `sleep 8123.25`, started without any marker
ENV_SECRET = f"env-secret-{uuid.uuid4().hex}"
DB_SECRET = f"db-secret-{uuid.uuid4().hex}"
VICTIM_TEXT = "host file: must never change\n"
EAGAIN, EPERM, ENOSYS = "EAGAIN", "EPERM", "ENOSYS"
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_by_handle_at", "name_to_handle_at", "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "settimeofday",
    "clock_settime", "adjtimex", "sethostname", "setdomainname", "vhangup",
)  # fmt: skip
SYSCALL_NUMBERS = {
    name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    for name in (*DENIED, "clone", "clone3", "fsopen")
}

# Learner-side helpers, pasted at the top of every attack: errno names, raw syscalls, and the
# observation channel (the pipe that is neither stdout nor stderr).
PRELUDE = """
import ctypes, errno, json, os, signal, socket, subprocess, sys, threading, time
MARK, TOKEN, NUMBERS = @MARK@, @TOKEN@, @NUMBERS@
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def name_of(exc):
    if isinstance(exc, OSError) and exc.errno in errno.errorcode:
        return errno.errorcode[exc.errno]
    return type(exc).__name__

def attempt(action):
    try:
        action()
    except Exception as exc:
        return name_of(exc)
    return "ok"

def raw(name, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(NUMBERS[name]), *(ctypes.c_long(a) for a in args))
    return errno.errorcode.get(ctypes.get_errno(), "?") if result == -1 else result

def mark_process():
    libc.prctl(15, MARK.encode(), 0, 0, 0)  # PR_SET_NAME

def observation_fd():
    for entry in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{entry}")
        except OSError:
            continue
        if int(entry) > 2 and target.startswith("pipe:"):
            return int(entry)
    raise RuntimeError("no observation pipe")

def report(tag, facts):
    print(tag + " " + json.dumps(facts), flush=True)

# Attacks that would hurt the host were the pid namespace gone (kill -1, ptrace pid 1) are only
# tried where the sandbox sees just its own few processes; elsewhere they report "not tried".
ISOLATED = len([p for p in os.listdir("/proc") if p.isdigit()]) < 10

def if_isolated(action):
    return action() if ISOLATED else "not tried: host processes are visible"
"""


def _render(code: str, **values: object) -> str:
    """PRELUDE + the attack, each @NAME@ replaced by the Python literal of its value."""
    text = PRELUDE + textwrap.dedent(code)
    values = {"MARK": MARK, "TOKEN": TOKEN, "NUMBERS": SYSCALL_NUMBERS, **values}
    for name, value in values.items():
        text = text.replace(f"@{name}@", repr(value))
    assert "@" not in text, "unreplaced placeholder"
    return text


def _report(result: GradeResult, tag: str) -> dict:
    """The facts an attack printed as `TAG {json}` (the first such line)."""
    for line in result.output.stdout.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1 :])
    raise AssertionError(f"no {tag} line in the job's output: {result.output.stdout[-2000:]!r}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _marked_processes() -> list[str]:
    """Processes on the host that an attack started (by name, argv[0] or `sleep 8123.25`)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if comm == MARK or MARK.encode() in cmdline or cmdline.startswith(PLAIN_SLEEP):
            found.append(f"pid {pid} state {state} comm {comm} cmdline {cmdline[:60]!r}")
    return found


def _host_uids(pids_with_marker: list[str]) -> set[int]:
    uids = set()
    for entry in pids_with_marker:
        pid = entry.split()[1]
        with contextlib.suppress(OSError, IndexError, ValueError):
            status = Path(f"/proc/{pid}/status").read_text()
            uids.add(
                int(next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1])
            )
    return uids


def _memory_limit(pid: str) -> int | None:
    """The tightest memory cgroup limit over a host process (v1 or v2), None if unlimited."""
    mounts = {}
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mountpoint, fstype, options, *_ = line.split()
        if fstype == "cgroup2" or (fstype == "cgroup" and "memory" in options.split(",")):
            mounts["v2" if fstype == "cgroup2" else "v1"] = Path(mountpoint)
    limits = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        version = "v2" if controllers == "" else "v1" if "memory" in controllers.split(",") else ""
        if version not in mounts:
            continue
        node = mounts[version] / path.lstrip("/")
        while node != mounts[version].parent:
            for name in ("memory.limit_in_bytes", "memory.max"):
                with contextlib.suppress(OSError, ValueError):
                    limits.append(int((node / name).read_text()))
            node = node.parent
    return min(limits) if limits else None


def _pids_hierarchy_usable() -> bool:
    """Where the worker can make per-job cgroups (root, pids and memory controllers)."""
    return os.geteuid() == 0 and bool(roots())


class Heartbeat:
    """Measures, while a job runs, how long the host takes to start a trivial process."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            subprocess.run(["true"], check=True)
            self.latencies.append(time.monotonic() - started)
            self._stop.wait(0.2)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


class Watcher:
    """Records, while a job runs, the host processes carrying the marker (and their uids)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.uids: set[int] = set()
        self.memory_limits: set[int | None] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            found = _marked_processes()
            self.uids |= _host_uids(found)
            for entry in found:
                with contextlib.suppress(OSError, ValueError):
                    self.memory_limits.add(_memory_limit(entry.split()[1]))
            self.seen.extend(f for f in found if f not in self.seen)
            self._stop.wait(0.1)

    def __enter__(self) -> "Watcher":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Host:
    settings: Settings
    content: Content
    data_dir: Path
    db: Path
    db_hash: str
    victim: Path
    sentinel: subprocess.Popen
    sentinel_mark: str
    cgroups: list[Path] = field(default_factory=list)  # created by the jobs, in order
    pool: WarmPool | None = None  # the warm pool, once a test asked for it

    def watched_dirs(self) -> list[Path]:
        """Where attacks try to leave a file named after TOKEN."""
        return [
            Path("/"),
            Path("/usr"),
            Path("/etc"),
            Path("/tmp"),
            PROJECT_ROOT,
            HARNESS_DIR,
            self.data_dir,
            self.victim.parent,
        ]

    def changes(self) -> list[str]:
        found = [str(p) for d in self.watched_dirs() for p in d.glob(f"*{TOKEN}*")]
        if _sha256(self.db) != self.db_hash:
            found.append(f"{self.db} modified")
        if self.victim.read_text() != VICTIM_TEXT:
            found.append(f"{self.victim} modified")
        if self.sentinel.poll() is not None:
            found.append("the host's sentinel process died")
        return found


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, content: Content) -> Iterator[Host]:
    """Settings shared by every attack, a worker secret in the environment, an app database
    with a secret, a victim file, a host process, and a spy on the jobs' pids cgroups."""
    data_dir = tmp_path_factory.mktemp("data")
    db = data_dir / "gradlab.db"
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("CREATE TABLE secrets (value TEXT)")
        connection.execute("INSERT INTO secrets VALUES (?)", (DB_SECRET,))
    victim = tmp_path_factory.mktemp("victim") / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    sentinel_mark = f"hs{TOKEN}"
    sentinel = subprocess.Popen([sentinel_mark, "600"], executable=shutil.which("sleep"))
    settings = Settings(
        data_dir=data_dir, content_dir=PROJECT_ROOT / "lessons", max_wall_s=MAX_WALL_S
    )
    env = Host(settings, content, data_dir, db, _sha256(db), victim, sentinel, sentinel_mark)

    original_slot = Cgroup.slot.__func__  # type: ignore[attr-defined]
    original_child = Cgroup.child

    def spy_slot(cls: type[Cgroup], **caps: int) -> Cgroup | None:
        cgroup = original_slot(cls, **caps)
        if cgroup is not None:
            env.cgroups.extend(cgroup.folders)
        return cgroup

    def spy_child(self: Cgroup, name: str, **caps: int | None) -> Cgroup:
        cgroup = original_child(self, name, **caps)
        env.cgroups.extend(cgroup.folders)
        return cgroup

    patch = pytest.MonkeyPatch()
    patch.setattr(Cgroup, "slot", classmethod(spy_slot))
    patch.setattr(Cgroup, "child", spy_child)
    patch.setenv("GRADLAB_ATTACK_SECRET", ENV_SECRET)
    try:
        yield env
    finally:
        patch.undo()
        sentinel.kill()
        sentinel.wait()


def _settled_slot_cgroups(host: Host) -> set[Path]:
    """Once the pool has every slot back and running (a killed slot restarts in the background),
    the cgroups its live slots hold: the only ones that may outlive a job."""
    if host.pool is None:
        return set()
    pool = host.pool
    deadline = time.monotonic() + 120
    while True:
        with pool._lock:
            free = list(pool._free)
        if len(free) == POOL_SLOTS and all(slot.running for slot in free):
            live: set[Path] = set()
            for slot in free:
                if slot._preparing is not None:  # the next standby is being moved in
                    slot._preparing.join()
                if slot.cgroup is not None:
                    live |= {f / c for f in slot.cgroup.folders for c in ("", "zygote")}
                standby = slot._standby[0] if slot._standby is not None else None
                if standby is not None:  # the idle standby's cgroup, waiting for a phase
                    live |= set(standby.folders)
            return live
        assert time.monotonic() < deadline, "the pool never got its slots back"
        time.sleep(0.1)


def _leftover_cgroups(host: Host) -> list[str]:
    live = _settled_slot_cgroups(host)
    return [str(p) for p in host.cgroups if p.exists() and p not in live]


def _wait_until_gone(timeout_s: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := _marked_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _grade(
    host: Host, code: str, pool: WarmPool | None = None, runs: list[SandboxRun] | None = None
) -> GradeResult:
    runner = run_in_sandbox if pool is None else pool.run

    def recorded(*, settings: Settings, job: SandboxJob) -> SandboxRun:
        run = runner(settings=settings, job=job)
        if runs is not None:
            runs.append(run)  # the sandbox's own account of the job
        return run

    return grade(
        content=host.content,
        settings=host.settings,
        exercise=EXERCISE,
        code=code,
        locale="en",
        runner=recorded,
    )


def attack(
    host: Host,
    code: str,
    pool: WarmPool | None = None,
    runs: list[SandboxRun] | None = None,
    **values: object,
) -> GradeResult:
    """Grade hostile `code` (in a fresh sandbox, or in the warm pool's slot) and check what
    must hold after any job (module docstring)."""
    assert not _marked_processes(), "processes of an earlier attack are still running"
    cgroups_before = len(host.cgroups)
    result = _grade(host, _render(code, **values), pool, runs)
    assert result.status != "passed", result
    printed = (
        result.output.stdout + result.output.stderr + (result.error.message if result.error else "")
    )
    assert ENV_SECRET not in printed and DB_SECRET not in printed
    assert host.changes() == []
    assert _wait_until_gone() == [], "processes outlived the job"
    if pool is None and _pids_hierarchy_usable():  # a pool slot got its cgroup when it started
        assert host.cgroups[cgroups_before:], "the job got no pids cgroup"
    assert _leftover_cgroups(host) == [], "a job's cgroup was left behind"
    return result


def _assert_error(result: GradeResult, kind: str, *in_message: str) -> None:
    assert result.status == "error" and result.error is not None, result
    assert result.error.kind == kind, result.error
    for text in in_message:
        assert text in result.error.message, result.error.message


def _grade_canonical(host: Host, pool: WarmPool | None = None) -> GradeResult:
    return _grade(host, CANONICAL.read_text(), pool)


@pytest.fixture(scope="module")
def pool(host: Host) -> Iterator[WarmPool]:
    """The warm pool (the worker's default sandbox), on the same settings: one slot whose
    zygote forks every job, so whatever a job leaves in the slot meets the next job."""
    host.pool = WarmPool(host.settings, slots=POOL_SLOTS)
    try:
        yield host.pool
    finally:
        host.pool.close()
        host.pool = None


# --- baseline: the sandbox works, so every "not passed" below means something --------------------


def test_canonical_solution_passes_before_the_attacks(host: Host) -> None:
    result = _grade_canonical(host)
    assert result.status == "passed", result


# --- one probe job: network, host files, secrets, privileges, syscalls, symlinks, /proc ----------

PROBE = """
facts = {}
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
facts["ids"] = [os.getuid(), os.geteuid(), os.getgid()]
facts["status"] = {k: status[k].strip() for k in ("CapEff", "CapPrm", "NoNewPrivs", "Seccomp")}
facts["setuid0"] = attempt(lambda: os.setuid(0))
facts["setgid0"] = attempt(lambda: os.setgid(0))
facts["setgroups0"] = attempt(lambda: os.setgroups([0]))
facts["sethostname"] = attempt(lambda: socket.sethostname("pwned"))
facts["hostname"] = socket.gethostname()

def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except Exception as exc:
        return "error " + name_of(exc)

# the worker's secrets
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
facts["environ"] = dict(os.environ)
facts["environ_files"] = {
    path: read(path)
    for path in ["/proc/self/environ", "/proc/1/environ"] + [f"/proc/{p}/environ" for p in pids]
}
facts["read_db"] = read(@DB@)
facts["list_data_dir"] = attempt(lambda: os.listdir(@DATA_DIR@))
facts["read_shadow"] = read("/etc/shadow")
facts["read_passwd"] = read("/etc/passwd")
facts["read_project"] = read(@PROJECT@ + "/pyproject.toml")
facts["sys_mounted"] = os.path.exists("/sys")

# other processes
facts["pids"] = pids
facts["cmdlines"] = [read(f"/proc/{p}/cmdline") for p in pids]
facts["host_pid_environ"] = read(f"/proc/{@HOST_PID@}/environ")
facts["host_pid_cwd"] = attempt(lambda: os.listdir(f"/proc/{@HOST_PID@}/cwd"))

# network
def tcp(address):
    socket.create_connection(address, timeout=2).close()
def udp(address):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(TOKEN.encode(), address)
def abstract_unix():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(@ABSTRACT@)
facts["tcp_host_listener"] = attempt(lambda: tcp(("127.0.0.1", @TCP_PORT@)))
facts["tcp_internet"] = attempt(lambda: tcp(("1.1.1.1", 53)))
facts["udp_host_listener"] = attempt(lambda: udp(("127.0.0.1", @UDP_PORT@)))
facts["udp_internet"] = attempt(lambda: udp(("1.1.1.1", 53)))
facts["dns"] = attempt(lambda: socket.getaddrinfo("example.com", 80))
facts["abstract_unix"] = attempt(abstract_unix)
facts["interfaces"] = [name for _, name in socket.if_nameindex()]

# writing outside scratch
def write(path, mode="w"):
    with open(path, mode) as f:
        f.write("pwned " + TOKEN)
targets = {
    "usr": "/usr", "harness": "/gradlab/harness", "job": "/gradlab/job", "etc": "/etc",
    "root": "/", "project": @PROJECT@, "data_dir": @DATA_DIR@, "python": sys.prefix,
}
facts["write"] = {k: attempt(lambda d=d: write(f"{d}/pwned-{TOKEN}")) for k, d in targets.items()}
facts["append_harness"] = attempt(lambda: write("/gradlab/harness/run.py", "a"))
facts["append_submission"] = attempt(lambda: write("/gradlab/job/submission.py", "a"))
facts["write_scratch"] = attempt(lambda: write("/scratch/mine"))

# symlinks planted in scratch and tmp
os.symlink("/etc/passwd", "/scratch/passwd-link")
os.symlink(@VICTIM@, "/tmp/victim-link")
os.symlink(os.path.dirname(@VICTIM@), "/scratch/victim-dir-link")
os.symlink("/gradlab/harness/run.py", "/scratch/harness-link")
os.symlink(@DB@, "/scratch/db-link")
facts["symlink_passwd_read"] = read("/scratch/passwd-link")
facts["symlink_victim_write"] = attempt(lambda: write("/tmp/victim-link"))
facts["symlink_dir_write"] = attempt(lambda: write(f"/scratch/victim-dir-link/pwned-{TOKEN}"))
facts["symlink_harness_write"] = attempt(lambda: write("/scratch/harness-link", "a"))
facts["symlink_db_read"] = read("/scratch/db-link")

# kernel knobs, terminals, descriptors
def open_for_writing(path):
    os.close(os.open(path, os.O_WRONLY))  # never writes a byte
facts["proc_write"] = {
    path: attempt(lambda path=path: open_for_writing(path))
    for path in ("/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern",
                 "/proc/sys/kernel/printk_ratelimit", "/proc/sys/vm/drop_caches")
}
facts["dev_tty"] = attempt(lambda: open("/dev/tty", "w"))
import fcntl, termios
facts["tiocsti"] = attempt(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x"))
opened = []
try:
    while len(opened) < 1024:
        opened.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    facts["fd_limit"] = [len(opened), name_of(exc)]
for fd in opened:
    os.close(fd)

report("PROBE", facts)

# syscalls: the seccomp filter (reported apart: without it, some of these could hang the probe)
facts = {}
facts["syscalls"] = {name: raw(name, 0, 0, 0, 0, 0) for name in @DENIED@}
facts["ptrace_traceme"] = raw("ptrace", 0, 0, 0, 0)
facts["ptrace_attach_parent"] = if_isolated(lambda: raw("ptrace", 16, os.getppid(), 0, 0))
facts["ptrace_attach_init"] = if_isolated(lambda: raw("ptrace", 16, 1, 0, 0))
facts["unshare_user"] = raw("unshare", @CLONE_NEWUSER@)
facts["unshare_mount"] = raw("unshare", @CLONE_NEWNS@)
facts["clone3"] = raw("clone3", 0, 0)

def clone_into(flags):
    # a raw clone(flags | SIGCHLD), fork-like: the child reports what it can do, by exit code
    ctypes.set_errno(0)
    args = [ctypes.c_long(a) for a in (NUMBERS["clone"], flags | 17, 0, 0, 0, 0)]
    pid = libc.syscall(*args)
    if pid == 0:
        caps = open("/proc/self/status").read().split("CapEff:")[1].split()[0]
        fs = libc.syscall(ctypes.c_long(NUMBERS["fsopen"]), ctypes.c_char_p(b"tmpfs"), 0)
        os._exit((1 if int(caps, 16) else 0) | (2 if fs >= 0 else 0))
    if pid < 0:
        return errno.errorcode.get(ctypes.get_errno(), "?")
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return "created" + (" +capabilities" if code & 1 else "") + (" +fsopen" if code & 2 else "")

facts["clone_namespaces"] = {
    "user": clone_into(@CLONE_NEWUSER@),
    "user+net": clone_into(@CLONE_NEWUSER@ | @CLONE_NEWNET@),
    "user+mount": clone_into(@CLONE_NEWUSER@ | @CLONE_NEWNS@),
}
report("SYSCALLS", facts)
raise RuntimeError("probe done")
"""


@dataclass
class Probe:
    result: GradeResult
    facts: dict
    tcp_connections: int
    udp_datagrams: list[bytes]
    unix_connections: int


@pytest.fixture(scope="module", params=["cold", "pool"])
def probe(request: pytest.FixtureRequest, host: Host) -> Iterator[Probe]:
    """The probe, in a fresh sandbox and in the warm pool's slot."""
    pool = request.getfixturevalue("pool") if request.param == "pool" else None
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    abstract = f"\0gradlab-attack-{TOKEN}"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(abstract)
    unix.listen()
    for listener in (tcp, udp, unix):
        listener.setblocking(False)
    try:
        result = attack(
            host,
            PROBE,
            pool,
            DB=str(host.db),
            DATA_DIR=str(host.data_dir),
            PROJECT=str(PROJECT_ROOT),
            VICTIM=str(host.victim),
            HOST_PID=os.getpid(),
            TCP_PORT=tcp.getsockname()[1],
            UDP_PORT=udp.getsockname()[1],
            ABSTRACT=abstract,
            DENIED=DENIED,
            CLONE_NEWUSER=CLONE_NEWUSER,
            CLONE_NEWNS=CLONE_NEWNS,
            CLONE_NEWNET=CLONE_NEWNET,
        )
        counts = {"tcp": 0, "unix": 0}
        for name, listener in (("tcp", tcp), ("unix", unix)):
            with contextlib.suppress(BlockingIOError):
                while True:
                    listener.accept()[0].close()
                    counts[name] += 1
        datagrams = []
        with contextlib.suppress(BlockingIOError):
            while True:
                datagrams.append(udp.recv(65536))
        yield Probe(result, _report(result, "PROBE"), counts["tcp"], datagrams, counts["unix"])
    finally:
        for listener in (tcp, udp, unix):
            listener.close()


def test_probe_ran_to_its_end_and_is_a_runtime_error(probe: Probe) -> None:
    _assert_error(probe.result, "runtime_error", "probe done")


def test_runs_as_nobody_without_capabilities_or_new_privileges(probe: Probe) -> None:
    assert probe.facts["ids"] == [65534, 65534, 65534]
    assert int(probe.facts["status"]["CapEff"], 16) == 0
    assert int(probe.facts["status"]["CapPrm"], 16) == 0
    assert probe.facts["status"]["NoNewPrivs"] == "1"
    assert probe.facts["status"]["Seccomp"] == "2"  # filter mode


def test_cannot_become_root_or_rename_the_host(probe: Probe) -> None:
    assert probe.facts["setuid0"] in ("EPERM", "EINVAL")  # uid 0 is not even mapped
    assert probe.facts["setgid0"] in ("EPERM", "EINVAL")
    assert probe.facts["setgroups0"] == "EPERM"
    assert probe.facts["sethostname"] == "EPERM"
    assert probe.facts["hostname"] == "sandbox"
    assert socket.gethostname() != "pwned"


def test_worker_environment_secret_is_out_of_reach(probe: Probe) -> None:
    facts = probe.facts
    assert not facts["environ_files"]["/proc/self/environ"].startswith("error")  # really read
    # the sandbox's init: bwrap (read), or the pool's zygote (not dumpable: unreadable)
    assert facts["environ_files"]["/proc/1/environ"] != "error ENOENT"
    everything = json.dumps([facts["environ"], facts["environ_files"], facts["host_pid_environ"]])
    assert ENV_SECRET not in everything
    assert not [key for key in facts["environ"] if key.startswith("GRADLAB_")]


def test_app_database_and_data_dir_are_out_of_reach(probe: Probe) -> None:
    assert probe.facts["read_db"] == "error ENOENT"
    assert probe.facts["symlink_db_read"] == "error ENOENT"
    assert probe.facts["list_data_dir"] == "ENOENT"
    assert DB_SECRET not in probe.result.output.stdout


def test_host_files_are_out_of_reach(probe: Probe) -> None:
    assert probe.facts["read_shadow"] == "error ENOENT"
    assert probe.facts["read_passwd"] == "error ENOENT"
    assert probe.facts["symlink_passwd_read"] == "error ENOENT"
    assert probe.facts["read_project"] == "error ENOENT"
    assert probe.facts["sys_mounted"] is False


def test_host_processes_are_invisible(probe: Probe, host: Host) -> None:
    facts = probe.facts
    assert len(facts["pids"]) < 10, facts["pids"]
    assert not [c for c in facts["cmdlines"] if host.sentinel_mark in c]
    assert host.sentinel.poll() is None  # the host process was there to be seen
    assert facts["host_pid_environ"].startswith("error")
    assert facts["host_pid_cwd"] != "ok"


def test_no_network_at_all(probe: Probe) -> None:
    facts = probe.facts
    assert facts["interfaces"] == ["lo"]
    assert facts["tcp_host_listener"] == "ECONNREFUSED"  # its own loopback, not the host's
    assert probe.tcp_connections == 0
    # A datagram to 127.0.0.1 may leave the socket, but only onto the sandbox's own loopback.
    assert probe.udp_datagrams == []
    assert facts["tcp_internet"] != "ok"
    assert facts["udp_internet"] != "ok"
    assert facts["dns"] != "ok"
    assert facts["abstract_unix"] != "ok"  # abstract sockets are per network namespace
    assert probe.unix_connections == 0


def test_cannot_write_outside_scratch(probe: Probe, host: Host) -> None:
    written = probe.facts["write"]
    for target in ("usr", "harness", "python"):
        assert written[target] in ("EROFS", "EACCES"), (target, written[target])
    assert probe.facts["append_harness"] in ("EROFS", "EACCES")
    # the job's files arrive over a pipe: there is no job folder to write to
    assert written["job"] in ("EROFS", "ENOENT", "EACCES")
    assert probe.facts["append_submission"] in ("EROFS", "ENOENT", "EACCES")
    assert probe.facts["write_scratch"] == "ok"
    # "/", /etc and the project's path are directories of the sandbox's own root tmpfs (bwrap
    # makes them to hold the binds), so a write there may succeed, but only in there:
    assert written["data_dir"] == "ENOENT"
    assert host.changes() == []


def test_symlinks_planted_in_scratch_do_not_reach_the_host(probe: Probe, host: Host) -> None:
    assert probe.facts["symlink_victim_write"] != "ok"
    assert probe.facts["symlink_dir_write"] != "ok"
    assert probe.facts["symlink_harness_write"] in ("EROFS", "EACCES")
    assert host.victim.read_text() == VICTIM_TEXT
    assert not list(host.victim.parent.glob(f"*{TOKEN}*"))


def test_sysrq_and_terminals_are_out_of_reach(probe: Probe) -> None:
    # bwrap covers /proc/sysrq-trigger read-only (absent altogether on some kernels)
    assert probe.facts["proc_write"]["/proc/sysrq-trigger"] in ("EROFS", "ENOENT", "EACCES")
    assert probe.facts["dev_tty"] != "ok"  # no controlling terminal (--new-session)
    assert probe.facts["tiocsti"] != "ok"


def test_host_sysctls_are_read_only(probe: Probe) -> None:
    sysctls = {k: v for k, v in probe.facts["proc_write"].items() if k.startswith("/proc/sys/")}
    assert set(sysctls.values()) <= {"EROFS", "EACCES", "EPERM"}, sysctls


def test_open_files_are_capped(probe: Probe) -> None:
    count, error = probe.facts["fd_limit"]
    assert error == "EMFILE" and count < 256


def test_seccomp_denies_dangerous_syscalls(probe: Probe) -> None:
    facts = _report(probe.result, "SYSCALLS")
    outcomes = facts["syscalls"]
    assert {name: outcomes[name] for name in DENIED if outcomes[name] != EPERM} == {}
    assert facts["ptrace_traceme"] == EPERM
    assert facts["ptrace_attach_parent"] == EPERM
    assert facts["ptrace_attach_init"] == EPERM
    assert facts["unshare_user"] == EPERM
    assert facts["unshare_mount"] == EPERM
    assert facts["clone3"] == ENOSYS  # so that libc falls back to a filterable clone()


def test_clone_cannot_create_namespaces(probe: Probe) -> None:
    clones = _report(probe.result, "SYSCALLS")["clone_namespaces"]
    assert set(clones.values()) == {EPERM}, clones


# --- the worker and the sandbox's own init are out of reach --------------------------------------

KILL_PARENT = """
outcome = {}
for name, pid in (("parent", os.getppid()), ("init", 1), ("worker", @HOST_PID@), ("all", -1)):
    outcome[name] = if_isolated(lambda pid=pid: attempt(lambda: os.kill(pid, signal.SIGKILL)))
report("KILL", outcome)
raise RuntimeError("still alive")
"""


def test_killing_the_parent_init_or_the_worker_changes_nothing(host: Host) -> None:
    result = attack(host, KILL_PARENT, HOST_PID=os.getpid())
    _assert_error(result, "runtime_error", "still alive")  # the harness survived and reported
    outcome = _report(result, "KILL")
    assert outcome["worker"] == "ESRCH"  # the worker's pid does not exist in there
    assert outcome["all"] == "ESRCH"  # kill(-1): nobody else to kill but itself and its init
    assert host.sentinel.poll() is None


# --- processes that try to outlive the job -------------------------------------------------------

DAEMONS = """
subprocess.Popen(["sleep", "8123.25"], start_new_session=True)
subprocess.Popen([MARK + "-sleep", "8124"], executable="/usr/bin/sleep", start_new_session=True)
if os.fork() == 0:  # the classic double fork: setsid, fork again, ignore every polite signal
    os.setsid()
    if os.fork() == 0:
        mark_process()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            time.sleep(0.1)
    os._exit(0)
os.wait()
time.sleep(1.5)  # long enough for the host to see the daemons alive
report("DAEMONS", {"started": True})
raise RuntimeError("daemons started")
"""


@dataclass
class Daemons:
    result: GradeResult
    seen_alive: list[str]
    host_uids: set[int]


@pytest.fixture(scope="module")
def daemons(host: Host) -> Daemons:
    with Watcher() as watcher:
        result = attack(host, DAEMONS)
    return Daemons(result, watcher.seen, watcher.uids)


def test_setsid_and_double_forked_daemons_die_with_the_job(daemons: Daemons) -> None:
    _assert_error(daemons.result, "runtime_error", "daemons started")
    assert _report(daemons.result, "DAEMONS") == {"started": True}
    seen = " ".join(daemons.seen_alive)
    assert f"comm {MARK}" in seen and f"{MARK}-sleep" in seen and "8123.25" in seen  # they ran
    assert daemons.result.timings.run_s < MAX_WALL_S  # nothing held the job's pipes open
    assert _marked_processes() == []  # ... and attack() waited for none to go


def test_job_processes_are_not_host_root(daemons: Daemons) -> None:
    assert daemons.host_uids, "no process of the job was seen"
    assert 0 not in daemons.host_uids, daemons.host_uids


# --- scratch is private to one job ---------------------------------------------------------------

SCRATCH_WRITER = """
secret = "scratch-secret-" + TOKEN
written = {}
for path in ("/scratch/secret.txt", "/tmp/secret.txt", "/dev/shm/secret.txt",
             "/scratch/.cache/secret.txt"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    written[path] = attempt(lambda path=path: open(path, "w").write(secret))
# System V shared memory outlives its process unless its IPC namespace dies with the job.
libc.shmget.restype = ctypes.c_int
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(@SHM_KEY@, 4096, 0o1666)  # IPC_CREAT | 0666; seccomp may deny it
if shmid >= 0:
    ctypes.memmove(libc.shmat(shmid, None, 0), secret.encode(), len(secret))
written["sysv_shm"] = shmid >= 0
report("WROTE", written)
raise RuntimeError("planted")
"""

SCRATCH_READER = """
found = []
for top in ("/scratch", "/tmp", "/dev/shm"):
    for directory, dirs, files in os.walk(top):
        # a runtime bound under /tmp (a CI clone) is a read-only mount: not scratch, skip it
        dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(directory, d))]
        for name in files:
            path = os.path.join(directory, name)
            try:
                if TOKEN in open(path, errors="replace").read():
                    found.append(path)
            except OSError:
                pass
libc.shmget.restype = ctypes.c_int
shm = libc.shmget(@SHM_KEY@, 0, 0)
report("FOUND", {"files": found, "sysv_shm": shm, "sysv_list": open("/proc/sysvipc/shm").read()})
raise RuntimeError("looked")
"""


def test_another_jobs_scratch_tmp_and_shared_memory_are_gone(host: Host) -> None:
    shm_key = int(TOKEN[:7], 16)
    first = attack(host, SCRATCH_WRITER, SHM_KEY=shm_key)
    _assert_error(first, "runtime_error", "planted")
    wrote = _report(first, "WROTE")
    assert wrote.pop("sysv_shm") in (True, False)  # created, or denied by seccomp: both fine
    assert set(wrote.values()) <= {"ok", True}  # every file planted
    second = attack(host, SCRATCH_READER, SHM_KEY=shm_key)
    _assert_error(second, "runtime_error", "looked")
    found = _report(second, "FOUND")
    assert found["files"] == []
    assert found["sysv_shm"] == -1
    assert str(shm_key) not in found["sysv_list"]


# --- resource exhaustion -------------------------------------------------------------------------

FORK_COUNT = """
forks, error = 0, None
try:
    while forks < 1000:
        if os.fork() == 0:
            os.execv("/usr/bin/sleep", [MARK + "-sleep", "60"])
        forks += 1
except OSError as exc:
    error = name_of(exc)
report("FORKS", {"forks": forks, "error": error})
raise RuntimeError("forks capped")
"""

FORK_BOMB = """
mark_process()
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


def test_forks_fail_with_eagain_well_before_200_processes(host: Host) -> None:
    with Heartbeat() as heartbeat:
        result = attack(host, FORK_COUNT)
    _assert_error(result, "runtime_error", "forks capped")
    forks = _report(result, "FORKS")
    assert forks["error"] == EAGAIN
    assert 10 < forks["forks"] < 200, forks
    assert max(heartbeat.latencies) < 2.0, heartbeat.latencies


def test_fork_bomb_is_capped_killed_at_the_wall_clock_and_the_host_stays_responsive(
    host: Host,
) -> None:
    runs: list[SandboxRun] = []
    with Heartbeat() as heartbeat, Watcher() as watcher:
        result = attack(host, FORK_BOMB, runs=runs)
    _assert_error(result, "timeout")
    # killed at the learner's deadline, by the sandbox's own account (as for endless jobs)
    (run,) = runs
    learner_s = sum(phase.wall_s for phase in run.learner_phases)
    assert MAX_WALL_S <= learner_s < MAX_WALL_S + CLEANUP_GRACE_S + 1.5, learner_s
    # the whole job adds a fresh slot's start (interpreter, torch, warm-up) and the trusted
    # phases before the learner's, on a machine the bomb just saturated: no hang, no more
    assert result.timings.run_s < MAX_WALL_S + 12
    assert len(heartbeat.latencies) >= 5 and max(heartbeat.latencies) < 3.0, heartbeat.latencies
    assert watcher.seen, "the bomb never ran"
    pids = {entry.split()[1] for entry in watcher.seen}
    assert len(pids) < 1000  # the bomb never got anywhere near the host's own limits


MEMORY = """
mark_process()  # so the host can look at this process's cgroups
time.sleep(0.5)
facts = {}
size = (@MEMORY_MB@ + 1024) << 20
import mmap
def shared():  # MAP_SHARED anonymous memory is shmem: RLIMIT_DATA does not count it
    mmap.mmap(-1, size).close()
def private():
    mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE).close()
facts["shared_over_limit"] = attempt(shared)
facts["private_over_limit"] = attempt(private)
report("MEMORY", facts)
chunks = []
while True:
    chunks.append(bytes(256 << 20))
"""


@dataclass
class MemoryBomb:
    result: GradeResult
    cgroup_limits: set[int | None]  # memory cgroup limits seen over the job's processes


def _capped_by_a_memory_cgroup(limits: set[int | None]) -> bool:
    """The job's processes were seen in a memory cgroup no larger than its limit (the watcher
    may also catch a marked host-side process in the worker's own, unlimited cgroup)."""
    return any(limit is not None and limit <= MEMORY_MB << 20 for limit in limits)


@pytest.fixture(scope="module")
def memory_bomb(host: Host) -> MemoryBomb:
    with Watcher() as watcher:
        result = attack(host, MEMORY, MEMORY_MB=MEMORY_MB)
    assert watcher.seen, "the job's process was never seen"
    return MemoryBomb(result, watcher.memory_limits)


def test_memory_bomb_is_a_memory_limit_error_not_a_hang(memory_bomb: MemoryBomb) -> None:
    _assert_error(memory_bomb.result, "memory_limit", f"{MEMORY_MB} MB", "MemoryError")
    lines = _render(MEMORY, MEMORY_MB=MEMORY_MB).splitlines()
    bomb_line = 1 + next(i for i, line in enumerate(lines) if "chunks.append" in line)
    error = memory_bomb.result.error
    assert error is not None and error.line == bomb_line
    assert memory_bomb.result.timings.run_s < MAX_WALL_S
    assert _report(memory_bomb.result, "MEMORY")["private_over_limit"] == "ENOMEM"  # limit on


def test_shared_memory_beyond_the_limit_is_refused(memory_bomb: MemoryBomb) -> None:
    shared = _report(memory_bomb.result, "MEMORY")["shared_over_limit"]
    assert shared != "ok" or _capped_by_a_memory_cgroup(memory_bomb.cgroup_limits)


DISK_FILL = """
mark_process()  # so the host can look at this process's cgroups
time.sleep(0.5)
filled, error = 0, None
block = bytes((64 << 20) - 4096)
try:  # files just under RLIMIT_FSIZE, 640 MiB in all
    for i in range(10):
        with open(f"{'/scratch' if i % 2 else '/tmp'}/fill-{i}", "wb") as f:
            f.write(block)
        filled += len(block)
except OSError as exc:
    error = name_of(exc)
report("FILL", {"filled_mib": filled >> 20, "error": error})
with open("/scratch/huge", "wb") as f:  # one file over RLIMIT_FSIZE: EFBIG (SIGXFSZ ignored)
    f.write(bytes(100 << 20))
"""


@dataclass
class DiskFill:
    result: GradeResult
    free_drop: dict[str, int]
    cgroup_limits: set[int | None]


@pytest.fixture(scope="module")
def disk_fill(host: Host) -> DiskFill:
    disks = {str(p): p for p in (Path("/"), host.data_dir, Path(os.environ.get("TMPDIR", "/tmp")))}
    before = {name: shutil.disk_usage(path).free for name, path in disks.items()}
    with Watcher() as watcher:
        result = attack(host, DISK_FILL)
    assert watcher.seen, "the job's process was never seen"
    drop = {name: before[name] - shutil.disk_usage(path).free for name, path in disks.items()}
    return DiskFill(result, drop, watcher.memory_limits)


def test_huge_file_stops_at_rlimit_fsize_and_the_host_disk_is_untouched(
    disk_fill: DiskFill,
) -> None:
    _assert_error(disk_fill.result, "runtime_error")
    message = disk_fill.result.error.message
    assert "File too large" in message or "No space left on device" in message, message
    assert disk_fill.result.timings.run_s < MAX_WALL_S
    for disk, drop in disk_fill.free_drop.items():
        assert drop < 256 << 20, (disk, drop)  # the job tried to write 740 MiB


def test_scratch_space_is_bounded(disk_fill: DiskFill) -> None:
    fill = _report(disk_fill.result, "FILL")
    bounded = fill["error"] == "ENOSPC" and fill["filled_mib"] < 512
    assert bounded or _capped_by_a_memory_cgroup(disk_fill.cgroup_limits), fill


OUTPUT_FLOOD = """
sys.stdout.write("o" * 5_000_000)
sys.stdout.flush()
os.write(1, b"w" * 5_000_000)
sys.stderr.write("e" * 5_000_000)
subprocess.run(["head", "-c", "20000000", "/dev/zero"], check=True)  # a child floods too
subprocess.run(["head", "-c", "20000000", "/dev/zero"], stdout=2, check=True)
raise RuntimeError("flooded")
"""


def test_output_flood_is_truncated_at_the_cap(host: Host) -> None:
    result = attack(host, OUTPUT_FLOOD)
    _assert_error(result, "runtime_error", "flooded")
    cap = host.settings.max_output_bytes
    assert result.output.truncated is True
    assert len(result.output.stdout) == cap and len(result.output.stderr) == cap
    assert set(result.output.stdout) == {"o"} and set(result.output.stderr) == {"e"}
    assert result.timings.run_s < MAX_WALL_S


# --- jobs that never end -------------------------------------------------------------------------

CPU_SPIN = """
def spin():
    while True:
        pass
for _ in range(2):
    if os.fork() == 0:
        mark_process()
        spin()
for _ in range(8):
    threading.Thread(target=spin, daemon=True).start()
spin()
"""

SLEEP_FOREVER = """
time.sleep(10**6)
"""

IGNORE_SIGTERM = """
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
    signal.signal(sig, signal.SIG_IGN)
if os.fork() == 0:
    mark_process()
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize(
    "code", [CPU_SPIN, SLEEP_FOREVER, IGNORE_SIGTERM], ids=["cpu-spin", "sleep", "ignore-sigterm"]
)
def test_endless_jobs_time_out_at_the_wall_clock(host: Host, code: str) -> None:
    runs: list[SandboxRun] = []
    with Watcher() as watcher:
        result = attack(host, code, runs=runs)
    _assert_error(result, "timeout", f"{MAX_WALL_S:g} seconds")
    # The learner's clock runs while the learner's code does, and the kill follows the deadline
    # within the zygote's grace; the trusted phases before it do not spend the learner's time.
    (run,) = runs
    learner_s = sum(phase.wall_s for phase in run.learner_phases)
    assert MAX_WALL_S <= learner_s < MAX_WALL_S + CLEANUP_GRACE_S + 1.5, learner_s
    # The whole job adds a fresh slot's start (interpreter, torch, warm-up) and the trusted
    # phases: the cold path runs all of them for one job.
    assert result.timings.run_s < MAX_WALL_S + 8
    if "mark_process" in code:
        assert watcher.seen, "the job's children never ran"


# --- what comes back over the observation channel ------------------------------------------------

PICKLE = """
import pickle
class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + @MARKER@,))
os.write(observation_fd(), pickle.dumps(Payload()))
sys.stdout.flush()
os._exit(@EXIT@)
"""


def test_pickle_on_the_observation_channel_is_never_unpickled(host: Host) -> None:
    marker = host.victim.parent / f"unpickled-{TOKEN}"
    result = attack(host, PICKLE, MARKER=str(marker), EXIT=1)
    assert not marker.exists()
    # an unreadable blob after the learner's code started is the learner's doing
    _assert_error(result, "runtime_error", "ended the process")


@pytest.fixture(scope="module")
def learner_exits_zero(host: Host) -> GradeResult:
    marker = host.victim.parent / f"unpickled-{TOKEN}"
    result = attack(host, PICKLE, MARKER=str(marker), EXIT=0)
    assert not marker.exists()
    return result


def test_exit_zero_after_garbage_observations_is_safe(learner_exits_zero: GradeResult) -> None:
    assert learner_exits_zero.status == "error"  # attack() checked not passed, host intact


def test_exit_zero_after_garbage_observations_is_the_learners_fault(
    learner_exits_zero: GradeResult,
) -> None:
    _assert_error(learner_exits_zero, "runtime_error")


OBSERVATION_FLOOD = """
chunk = b"\\0" * (1 << 20)
fd = observation_fd()
for _ in range(@MIB@):
    os.write(fd, chunk)
raise RuntimeError("flooded the observation channel")
"""


def test_observation_flood_is_the_learners_fault(host: Host) -> None:
    """Only code in the sandbox can write to the observation channel: flooding it past
    max_observation_bytes is the learner's doing (output_limit), never an internal_error."""
    mib = (host.settings.max_observation_bytes >> 20) + 1
    result = attack(host, OBSERVATION_FLOOD, MIB=mib)
    _assert_error(result, "output_limit")
    assert result.timings.run_s < MAX_WALL_S


FORGED = """
import gc
from harness import protocol
from harness.exercises.accumulation.problem import AccumulationScenario, make_model
# the phase's request is somewhere in this process's memory: find it
spec = next(
    o for o in gc.get_objects() if isinstance(o, dict) and "scenarios" in o and "harness" in o
)
tensors, scenarios = {}, []
indices = list(range(len(spec["scenarios"])))
for index, data in enumerate(spec["scenarios"]):
    scenario = AccumulationScenario.from_dict(data)
    width = sum(p.numel() for p in make_model(scenario).parameters())
    steps = -(-scenario.microbatches // scenario.accum_steps)
    fake = torch.randn(steps, width, dtype=torch.float64)
    tensors[f"s{index}.grads"] = fake
    tensors[f"s{index}.params"] = fake.cumsum(0)
    tensors[f"s{index}.final"] = fake.sum(0)
    tensors[f"s{index}.fingerprints"] = torch.zeros(0, dtype=torch.float64)
    scenarios.append({
        "steps": steps, "zero_grad_calls": steps + 1, "backward_calls": scenario.microbatches,
        "forward_shapes": [], "fingerprint_rows": [],
        "step_meta": [
            {"forwards": 0, "zero_grad_calls": k + 1, "grad_none": 0,
             "backward_calls": min((k + 1) * scenario.accum_steps, scenario.microbatches)}
            for k in range(steps)
        ],
    })
meta = {"device": "cpu", "dtype": "torch.float64", "phase": "learner", "indices": indices,
        "scenarios": scenarios}
os.write(observation_fd(), protocol.encode(tensors, meta))
os._exit(0)
"""


def test_forged_perfect_looking_observations_do_not_pass(host: Host) -> None:
    result = attack(host, FORGED)
    assert result.status == "failed", result  # well-formed, so judged: and judged wrong
    failed = {check.id for check in result.checks if not check.passed}
    assert {"gradients", "parameters"} <= failed


# --- the warm pool: what one job leaves in its slot must not reach the next job ------------------

POOL_LEFTOVERS = ("/scratch/s.txt", "/tmp/s.txt", "/dev/shm/s.txt", "/scratch/.cache/s.txt")
ROOT_LEFTOVERS = ("/s.txt", "/etc/s.txt", "/gradlab/s.txt", PROJECT_ROOT.as_posix() + "/s.txt")

POOL_PLANTER = """
secret = "pool-secret-" + TOKEN
planted = {}
def plant(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(secret)
for path in @PATHS@:
    planted[path] = attempt(lambda path=path: plant(path))
libc.shmget.restype = ctypes.c_int
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(@SHM_KEY@, 4096, 0o1666)  # IPC_CREAT | 0666; seccomp may deny it
if shmid >= 0:
    ctypes.memmove(libc.shmat(shmid, None, 0), secret.encode(), len(secret))
planted["sysv_shm"] = "ok" if shmid >= 0 else "denied"
subprocess.Popen([MARK + "-sleep", "8125"], executable="/usr/bin/sleep", start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        mark_process()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(0.1)
    os._exit(0)
os.wait()
time.sleep(0.5)  # long enough for the host to see the daemons alive
report("PLANTED", planted)
raise RuntimeError("planted")
"""

POOL_FINDER = """
found = []
for path in @PATHS@:
    try:
        if TOKEN in open(path).read():
            found.append(path)
    except OSError:
        pass
libc.shmget.restype = ctypes.c_int
if libc.shmget(@SHM_KEY@, 0, 0) >= 0:
    found.append("sysv_shm")
for pid in filter(str.isdigit, os.listdir("/proc")):
    if open(f"/proc/{pid}/comm").read().strip() == MARK:
        found.append(pid)
report("FOUND", found)
raise RuntimeError("looked")
"""


@dataclass
class PoolLeftovers:
    planted: dict
    found: list[str]


@pytest.fixture(scope="module")
def pool_leftovers(host: Host, pool: WarmPool) -> PoolLeftovers:
    paths = [*POOL_LEFTOVERS, *ROOT_LEFTOVERS]
    key = int(TOKEN[3:10], 16)
    with Watcher() as watcher:
        planter = attack(host, POOL_PLANTER, pool, PATHS=paths, SHM_KEY=key)
    _assert_error(planter, "runtime_error", "planted")
    seen = " ".join(watcher.seen)
    assert f"comm {MARK}" in seen and f"{MARK}-sleep" in seen, "the daemons never ran"
    finder = attack(host, POOL_FINDER, pool, PATHS=paths, SHM_KEY=key)
    _assert_error(finder, "runtime_error", "looked")
    return PoolLeftovers(_report(planter, "PLANTED"), _report(finder, "FOUND"))


def test_pool_kills_daemons_and_wipes_scratch_between_jobs(pool_leftovers: PoolLeftovers) -> None:
    planted = pool_leftovers.planted
    assert all(planted[path] == "ok" for path in POOL_LEFTOVERS), planted  # scratch areas
    # the sandbox's root is read-only and System V IPC is denied: nothing to plant there
    # (a project checked out under /tmp, a CI clone, sits in the writable, wiped /tmp)
    outside_tmp = [path for path in ROOT_LEFTOVERS if not path.startswith("/tmp/")]
    assert all(planted[path] != "ok" for path in outside_tmp), planted
    assert planted["sysv_shm"] == "denied", planted
    assert not set(pool_leftovers.found) & {*POOL_LEFTOVERS}, pool_leftovers.found
    assert not [entry for entry in pool_leftovers.found if entry.isdigit()]  # no daemon


def test_pool_next_job_finds_nothing_of_the_previous(pool_leftovers: PoolLeftovers) -> None:
    assert pool_leftovers.found == []


def test_pool_zygote_survives_its_jobs_kills_and_grades_the_next_job(
    host: Host, pool: WarmPool
) -> None:
    result = attack(host, KILL_PARENT, pool, HOST_PID=os.getpid())
    _assert_error(result, "runtime_error", "still alive")
    outcome = _report(result, "KILL")
    assert outcome["worker"] == "ESRCH" and outcome["all"] == "ESRCH"
    assert _grade_canonical(host, pool).status == "passed"


def test_pool_slot_of_a_job_that_ignores_sigterm_is_recycled(host: Host, pool: WarmPool) -> None:
    with Watcher() as watcher:
        result = attack(host, IGNORE_SIGTERM, pool)
    _assert_error(result, "timeout", f"{MAX_WALL_S:g} seconds")
    assert MAX_WALL_S <= result.timings.run_s < MAX_WALL_S + 5
    assert watcher.seen, "the job's child never ran"
    assert _grade_canonical(host, pool).status == "passed"  # a fresh slot


# A loop that never accumulates: one forward over each whole window, after unhooking the
# harness's forward recorder (the learner's code shares the harness's process and objects).
TAMPERED = """
model._forward_pre_hooks.clear()
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    optimizer.zero_grad()
    x = torch.cat([b[0] for b in window])
    y = torch.cat([b[1] for b in window])
    loss_fn(model(x), y).backward()
    optimizer.step()
"""


def test_unhooking_the_recorder_does_not_pass_a_loop_without_accumulation(host: Host) -> None:
    """Once a hole: the 'microbatches' check trusted batch sizes a hook recorded inside the
    learner's process. Now the kernel's memory peak decides, and clearing hooks changes it not."""
    result = _grade(host, _render(TAMPERED))
    assert result.status != "passed", [(c.id, c.passed) for c in result.checks]
    microbatches = next(c for c in result.checks if c.id == "microbatches")
    assert not microbatches.passed
    assert result.diagnosis is not None and result.diagnosis.code == "microbatches_not_used"


# --- after everything: the next job on the same settings grades correctly ------------------------


def test_next_job_after_the_battery_grades_correctly(host: Host) -> None:
    result = _grade_canonical(host)
    assert result.status == "passed", result
    assert result.error is None and result.output.truncated is False
    assert _marked_processes() == []
    assert _leftover_cgroups(host) == []
    assert host.changes() == []
