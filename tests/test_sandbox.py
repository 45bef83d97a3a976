"""The real bubblewrap sandbox: what learner code can see and do, probed from the inside."""

import json
import os
import socket
import textwrap
import threading
from pathlib import Path

import pytest

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import Content
from gradlab.results import GradeResult
from worker.grading import grade
from worker.sandbox import _python_roots, bwrap_argv

EXERCISE = "gradient-accumulation/accumulate"
SECRET = "worker-secret-value-7f3a"

JOB_NICE = 7
PROBE = textwrap.dedent(
    """
    import json, os, socket
    facts = {"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd()}
    facts["env"] = dict(os.environ)
    try:  # PID 1 is the slot's zygote: not dumpable, so its environ is not readable either
        facts["proc1_environ"] = open("/proc/1/environ", "rb").read().decode(errors="replace")
    except OSError as exc:
        facts["proc1_environ"] = type(exc).__name__
    facts["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    def can(action):
        try:
            action()
            return True
        except Exception as exc:
            return type(exc).__name__
    def connect(host, port):
        socket.create_connection((host, port), timeout=2).close()
    facts["tcp_loopback"] = can(lambda: connect("127.0.0.1", PORT))
    facts["dns"] = can(lambda: socket.getaddrinfo("example.com", 80))
    def udp():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"x", ("1.1.1.1", 53))
    facts["udp_out"] = can(udp)
    facts["read_project"] = can(lambda: open("PROJECT/pyproject.toml").read())
    facts["read_data_dir"] = can(lambda: os.listdir("DATA"))
    try:
        facts["root_home"] = os.listdir("/root")
    except OSError as exc:
        facts["root_home"] = type(exc).__name__
    facts["write_usr"] = can(lambda: open("/usr/gradlab-was-here", "w").write("x"))
    facts["write_harness"] = can(lambda: open("/gradlab/harness/x.py", "w").write("x"))
    facts["write_scratch"] = can(lambda: open("/scratch/note.txt", "w").write("x"))
    facts["write_tmp"] = can(lambda: open("/tmp/note.txt", "w").write("x"))
    facts["etc_passwd"] = can(lambda: open("/etc/passwd").read())
    facts["nice"] = os.nice(0)
    facts["raise_priority"] = can(lambda: os.nice(-1))
    print("PROBE " + json.dumps(facts))
    """
)


def _grade(settings: Settings, content: Content, code: str) -> GradeResult:
    return grade(content=content, settings=settings, exercise=EXERCISE, code=code, locale="en")


def _probe_facts(result: GradeResult) -> dict:
    line = next(ln for ln in result.output.stdout.splitlines() if ln.startswith("PROBE "))
    return json.loads(line[len("PROBE ") :])


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory, content: Content) -> dict:
    """Run the probe once, with a TCP listener on the host's loopback and a secret in the
    worker's environment, both of which must stay out of reach."""
    data_dir = tmp_path_factory.mktemp("data")
    (data_dir / "gradlab.db").write_text("secret database")
    settings = Settings(data_dir=data_dir, content_dir=PROJECT_ROOT / "lessons", job_nice=JOB_NICE)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    connections: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connections.append(listener.accept())
            except TimeoutError:
                continue

    accepting = threading.Thread(target=accept, daemon=True)
    accepting.start()
    code = (
        PROBE.replace("PORT", str(listener.getsockname()[1]))
        .replace("PROJECT", str(PROJECT_ROOT))
        .replace("DATA", str(data_dir))
    )
    os.environ["GRADLAB_TEST_SECRET"] = SECRET
    try:
        result = _grade(settings, content, code)
    finally:
        del os.environ["GRADLAB_TEST_SECRET"]
        stop.set()
        accepting.join()
        listener.close()
    facts = _probe_facts(result)
    facts["_connections"] = len(connections)
    return facts


def test_runs_as_nobody_in_scratch(probe: dict) -> None:
    assert (probe["uid"], probe["gid"]) == (65534, 65534)
    assert probe["cwd"] == "/scratch"


def test_environment_is_cleared(probe: dict) -> None:
    assert SECRET not in json.dumps(probe["env"])
    assert SECRET not in probe["proc1_environ"]
    assert not any(key.startswith("GRADLAB_") for key in probe["env"])


def test_learner_code_runs_niced_and_cannot_take_priority_back(probe: dict) -> None:
    """Requests to a web process on the same host can come before learner code (job_nice)."""
    assert probe["nice"] == min(os.nice(0) + JOB_NICE, 19)
    assert probe["raise_priority"] == "PermissionError"


def test_sees_only_its_own_processes(probe: dict) -> None:
    assert os.getpid() not in probe["pids"] or len(probe["pids"]) < 10
    assert len(probe["pids"]) < 10


def test_no_network(probe: dict) -> None:
    assert probe["tcp_loopback"] is not True
    assert probe["_connections"] == 0
    assert probe["dns"] is not True
    assert probe["udp_out"] is not True


def test_host_files_are_out_of_reach(probe: dict) -> None:
    assert probe["read_project"] == "FileNotFoundError"
    assert probe["read_data_dir"] == "FileNotFoundError"
    # /root exists inside only as the path to a bound Python runtime (e.g. pyenv), if at all
    if isinstance(probe["root_home"], list):
        for entry in probe["root_home"]:
            assert any(root.startswith(f"/root/{entry}") for root in _python_roots()), entry
    assert probe["etc_passwd"] == "FileNotFoundError"


def test_system_is_read_only_and_scratch_is_writable(probe: dict) -> None:
    assert probe["write_usr"] is not True
    assert probe["write_harness"] is not True
    assert not Path("/usr/gradlab-was-here").exists()
    assert probe["write_scratch"] is True
    assert probe["write_tmp"] is True


def test_scratch_does_not_survive_the_job(settings: Settings, content: Content) -> None:
    code = textwrap.dedent(
        """
        import os
        print("LEFTOVER", os.path.exists("/scratch/note.txt"), os.path.exists("/tmp/note.txt"))
        open("/scratch/note.txt", "w").write("x")
        """
    )
    result = _grade(settings, content, code)
    assert result.output.stdout.splitlines()[0] == "LEFTOVER False False"


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


def test_timeout_kills_the_job_and_everything_it_started(tmp_path: Path, content: Content) -> None:
    settings = Settings(data_dir=tmp_path, content_dir=PROJECT_ROOT / "lessons", max_wall_s=3)
    code = textwrap.dedent(
        """
        import subprocess
        subprocess.Popen(["sleep", "9173"], start_new_session=True)
        while True:
            pass
        """
    )
    result = _grade(settings, content, code)
    assert result.status == "error" and result.error.kind == "timeout"
    assert "3 seconds" in result.error.message
    assert result.timings.run_s < 15
    assert _processes_with("9173") == []


def test_output_is_capped_and_marked_truncated(settings: Settings, content: Content) -> None:
    code = "import sys\nsys.stdout.write('x' * 300_000)\nraise SystemExit\n"
    result = _grade(settings, content, code)
    assert result.output.truncated is True
    assert len(result.output.stdout) == settings.max_output_bytes


def test_harness_failure_is_internal_not_the_learners(tmp_path: Path, content: Content) -> None:
    """A sandbox that cannot even start is the platform's fault."""
    settings = Settings(
        data_dir=tmp_path, content_dir=PROJECT_ROOT / "lessons", bwrap_path="/bin/false"
    )
    result = _grade(settings, content, "pass\n")
    assert result.status == "error" and result.error.kind == "internal_error"


def test_private_mounts_come_before_binds(settings: Settings) -> None:
    """A tmpfs listed after a bind hides it: a runtime under /tmp (a CI clone) must stay visible."""
    argv = bwrap_argv(settings=settings, harness_args=["harness.zygote", "5"], use_gpu=False)
    private = {"/proc", "/dev", "/tmp", "/scratch", "/dev/shm"}
    last_private = max(
        i
        for i, arg in enumerate(argv)
        if arg in ("--tmpfs", "--proc", "--dev") and argv[i + 1] in private
    )
    first_bind = min(i for i, arg in enumerate(argv) if arg.endswith("bind"))
    assert last_private < first_bind


def test_gpu_nodes_and_device_only_when_assigned(settings: Settings) -> None:
    cpu = bwrap_argv(settings=settings, harness_args=["harness.zygote", "5"], use_gpu=False)
    assert not any("nvidia" in arg for arg in cpu) and "CUDA_VISIBLE_DEVICES" not in cpu
    gpu = bwrap_argv(
        settings=settings, harness_args=["harness.zygote", "5"], use_gpu=True, gpu_id=3
    )
    assert gpu[gpu.index("CUDA_VISIBLE_DEVICES") + 1] == "3"
    assert gpu[gpu.index("CUDA_DEVICE_ORDER") + 1] == "PCI_BUS_ID"
