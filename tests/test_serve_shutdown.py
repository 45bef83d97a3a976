"""`gradlab serve` stops its local workers: on SIGTERM/SIGINT within their grace (then it kills
them), and when serve itself is SIGKILLed the workers die on their own. Real processes."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gradlab.config import PROJECT_ROOT
from tests.pg import free_port

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

WORKERS = 2
GRACE_S = 3.0
START_TIMEOUT_S = 90.0  # a busy 2-core machine takes ~35 s


@dataclass
class Serve:
    process: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _children(pid: int) -> set[int]:
    """Direct children of `pid` (every thread's list: a worker restarted by the supervising
    thread is that thread's child)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            found.update(int(child) for child in (task / "children").read_text().split())
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError):
        return []


def _workers(pid: int) -> set[int]:
    """serve's `gradlab worker` children."""
    return {child for child in _children(pid) if "worker" in _cmdline(child)}


def _web_processes(pid: int) -> set[int]:
    """serve's uvicorn children (spawned by multiprocessing: no resource tracker)."""
    return {
        child for child in _children(pid) if any("spawn_main" in part for part in _cmdline(child))
    }


def _alive(pid: int) -> bool:
    """Running, or stopped; an unreaped zombie counts as gone (it grades nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_until(condition, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _descendants(pid: int) -> set[int]:
    found = _children(pid)
    for child in list(found):
        found |= _descendants(child)
    return found


@pytest.fixture
def serve(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Serve]:
    """`gradlab serve --workers 2` on a free port, up: /healthz answers and both workers
    logged that they are ready. Cold sandboxes (none runs while idle) unless the test is
    parametrized indirectly with "pool"; one web process (serve's own) unless the parameter
    ends in "+web" and a count ("pool+web2")."""
    sandbox, _, web = getattr(request, "param", "cold").partition("+web")
    web_processes = int(web or 1)
    port = free_port()
    log = tmp_path / "serve.log"
    env = {
        **os.environ,
        "GRADLAB_DATA_DIR": str(tmp_path / "data"),
        "GRADLAB_POLL_INTERVAL_S": "0.1",
        "GRADLAB_LOG_FORMAT": "text",
        "GRADLAB_SANDBOX": sandbox,
    }
    command = [sys.executable, "-m", "gradlab.cli", "serve", "--port", str(port)]
    command += ["--workers", str(WORKERS), "--worker-grace", str(GRACE_S)]
    command += ["--web-processes", str(web_processes)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=PROJECT_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    served = Serve(process, log)

    def up() -> bool:
        assert process.poll() is None, served.log_text()
        if served.log_text().count(" ready (") < WORKERS:
            return False
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    started = time.monotonic()
    try:
        assert _wait_until(up, START_TIMEOUT_S), f"serve did not start:\n{served.log_text()}"
        assert len(_workers(process.pid)) == WORKERS, served.log_text()
        web = _web_processes(process.pid)
        assert len(web) == (web_processes if web_processes > 1 else 0), served.log_text()
        print(f"serve and {WORKERS} workers up in {time.monotonic() - started:.1f} s")
        yield served
    finally:
        left = _descendants(process.pid) if process.poll() is None else set()
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in left:  # a failed test must not leave graders behind either
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("serve", ["cold+web2"], indirect=True)
def test_sigterm_stops_the_web_then_every_worker(serve: Serve) -> None:
    processes = _descendants(serve.process.pid)
    started = time.monotonic()
    serve.process.send_signal(signal.SIGTERM)
    try:
        returncode = serve.process.wait(timeout=GRACE_S + 5)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve still running {GRACE_S + 5} s after SIGTERM:\n{serve.log_text()}")
    took = time.monotonic() - started
    assert returncode == -signal.SIGTERM, serve.log_text()  # ended by the signal, as uvicorn means
    # multiprocessing's resource tracker (with several web processes) ends when serve's end
    # closes its pipe: a moment after serve
    gone = _wait_until(lambda: not [pid for pid in processes if _alive(pid)], 2)
    assert gone, ([(pid, _cmdline(pid)) for pid in processes if _alive(pid)], serve.log_text())
    assert took < GRACE_S, f"idle workers stop at once, not after the grace ({took:.1f} s)"
    assert "still running; killed" not in serve.log_text()
    print(f"SIGTERM: serve and {WORKERS} idle workers gone in {took:.2f} s")


def test_a_worker_that_does_not_stop_is_killed_after_the_grace(serve: Serve) -> None:
    workers = _workers(serve.process.pid)
    stuck = min(workers)
    os.kill(stuck, signal.SIGSTOP)  # holds its SIGTERM pending, like a worker deep in a job
    started = time.monotonic()
    serve.process.send_signal(signal.SIGINT)
    try:
        returncode = serve.process.wait(timeout=GRACE_S + 5)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve did not kill its stuck worker:\n{serve.log_text()}")
    took = time.monotonic() - started
    assert returncode == -signal.SIGINT, serve.log_text()
    assert GRACE_S <= took < GRACE_S + 5, took
    assert not [pid for pid in workers if _alive(pid)], serve.log_text()
    assert f"worker {stuck} still running; killed" in serve.log_text()
    assert serve.log_text().count("still running; killed") == 1  # the other one had stopped
    print(f"SIGINT, one worker SIGSTOPped: serve gone in {took:.2f} s (grace {GRACE_S:g} s)")


def test_a_second_signal_kills_the_workers_without_waiting(serve: Serve) -> None:
    workers = _workers(serve.process.pid)
    os.kill(min(workers), signal.SIGSTOP)
    started = time.monotonic()
    serve.process.send_signal(signal.SIGTERM)
    # the second one once the web is down (while uvicorn shuts down, uvicorn handles signals)
    stopping = f"stopping {WORKERS} local worker(s)"
    assert _wait_until(lambda: stopping in serve.log_text(), GRACE_S), serve.log_text()
    serve.process.send_signal(signal.SIGTERM)
    returncode = serve.process.wait(timeout=GRACE_S + 5)
    took = time.monotonic() - started
    assert returncode == -signal.SIGTERM, serve.log_text()
    assert took < GRACE_S, took
    assert not [pid for pid in workers if _alive(pid)], serve.log_text()


@pytest.mark.parametrize("serve", ["pool+web2"], indirect=True)
def test_workers_and_their_sandboxes_die_with_a_killed_serve(serve: Serve) -> None:
    workers = _workers(serve.process.pid)
    # the workers, their sandboxes' zygotes, and the two web processes
    processes = _descendants(serve.process.pid)
    assert len(_web_processes(serve.process.pid)) == 2
    started = time.monotonic()
    serve.process.kill()
    serve.process.wait()
    gone = _wait_until(lambda: not any(_alive(pid) for pid in processes), 5)
    took = time.monotonic() - started
    assert gone, f"{[pid for pid in processes if _alive(pid)]} outlived serve (workers {workers})"
    print(f"SIGKILL: {len(processes)} processes ({WORKERS} workers) gone {took:.2f} s after serve")
