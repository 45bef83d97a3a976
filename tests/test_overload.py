"""Overload is answered, never a deadlock: a real `gradlab serve` with a small database pool under
many more concurrent requests than connections, and `?wait` requests that hold none while they
wait. Every answer is a success, a 429 or a 503 with `Retry-After`; /healthz stays fast."""

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session

from app.admission import Gate, Overloaded
from gradlab import tokens
from gradlab.config import PROJECT_ROOT, Settings
from gradlab.db import POOL_TIMEOUT_S, init_db, make_engine
from tests.conftest import wait_until_serving
from tests.pg import free_port

EXERCISE = "gradient-accumulation/accumulate"
POOL = {"GRADLAB_DB_POOL_SIZE": "2", "GRADLAB_DB_MAX_OVERFLOW": "2"}  # 4 connections


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(url, grader token) of a web-only `gradlab serve` (no worker: jobs stay queued)."""
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir)
    engine = make_engine(settings)
    init_db(engine)
    with Session(engine) as session:
        token = tokens.create(session=session, name="load").token
    engine.dispose()
    port = free_port()
    log_path = tmp_path / "serve.log"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GRADLAB_")},
        **POOL,
        "GRADLAB_DATA_DIR": str(data_dir),
        "GRADLAB_GRADER_RATE_LIMIT": "100000",
        "GRADLAB_SUBMISSION_RATE_LIMIT": "100000",
        # the caps on waiting submissions have their own tests (tests/test_admission.py)
        "GRADLAB_MAX_PENDING_PER_ADDRESS": "100000",
        "GRADLAB_POLL_INTERVAL_S": "0.2",
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gradlab.cli", "serve", "--workers", "0", "--port", str(port)],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(process, url, log_path)
        yield url, token
        assert process.poll() is None, log_path.read_text()[-3000:]
        assert "Traceback" not in log_path.read_text(), log_path.read_text()[-3000:]
    finally:
        process.terminate()
        process.wait(timeout=30)


def _timed(call) -> tuple[int, float, dict[str, str]]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    try:
        response = call()
    except httpx.HTTPError as exc:
        return -1, time.monotonic() - started, {"error": repr(exc)}
    return response.status_code, time.monotonic() - started, dict(response.headers)


def test_many_more_requests_than_connections_are_answered_not_deadlocked(
    web: tuple[str, str],
) -> None:
    url, token = web
    bearer = {"Authorization": f"Bearer {token}"}
    health: list[float] = []
    stop = threading.Event()

    def watch_health() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                status, took, _ = _timed(lambda: client.get(f"{url}/healthz"))
                assert status == 200
                health.append(took)
                time.sleep(0.2)

    def submit(index: int) -> tuple[int, float, dict[str, str]]:
        with httpx.Client(timeout=60) as client:
            if index % 5 == 0:  # an anonymous learner holding the request for the result
                return _timed(
                    lambda: client.post(
                        f"{url}/api/v1/submissions?wait=8", json={"exercise": EXERCISE, "code": "x"}
                    )
                )
            return _timed(
                lambda: client.post(
                    f"{url}/api/v1/submissions",
                    json={"exercise": EXERCISE, "code": f"# {index}"},
                    headers=bearer,
                )
            )

    watcher = threading.Thread(target=watch_health)
    watcher.start()
    try:
        with ThreadPoolExecutor(max_workers=100) as pool:
            answers = list(pool.map(submit, range(200)))
    finally:
        stop.set()
        watcher.join()
    statuses = sorted({status for status, _, _ in answers})
    assert set(statuses) <= {200, 202, 503}, statuses
    for status, _, headers in answers:
        if status == 503:
            assert int(headers["retry-after"]) >= 1
    accepted = sum(status == 202 for status, _, _ in answers)
    assert accepted >= 20, accepted  # admission sheds the excess; it does not refuse all
    # Loose bounds, against a deadlock rather than for speed (bench/ measures that): stuck
    # requests waited for the pool's 30 s timeout and then failed; a 503 comes after the
    # admission wait (1 s), a queued submission well before the pool's 10 s timeout.
    posts = [took for index, (_, took, _) in enumerate(answers) if index % 5]
    assert max(posts) < POOL_TIMEOUT_S, max(posts)
    waits = [took for index, (_, took, _) in enumerate(answers) if index % 5 == 0]
    assert max(waits) < 8 + POOL_TIMEOUT_S, max(waits)  # held for the wait, then answered
    assert health and max(health) < 3.0, max(health)  # its own connection: no queue
    # and right after, the server is itself again
    with httpx.Client(timeout=5) as client:
        assert client.get(f"{url}/api/v1/exercises").status_code == 200
        again = client.post(
            f"{url}/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}, headers=bearer
        )
        assert again.status_code == 202, again.text


def test_waiting_requests_hold_no_connection(web: tuple[str, str]) -> None:
    """16 learners waiting for results of jobs no worker takes (web only): the 4 connections
    stay free for everyone else, who is answered at once."""
    url, _ = web

    def wait_for_result() -> int:
        with httpx.Client(timeout=30) as client:
            return client.post(
                f"{url}/api/v1/submissions?wait=6", json={"exercise": EXERCISE, "code": "x"}
            ).status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        waiting = [pool.submit(wait_for_result) for _ in range(16)]
        time.sleep(1.5)  # all are waiting now
        with httpx.Client(timeout=10) as client:
            for _ in range(10):
                status, took, _ = _timed(lambda: client.get(f"{url}/api/v1/submissions"))
                assert status == 200 and took < 3.0, (status, took)  # not queued behind them
                status, took, _ = _timed(lambda: client.get(f"{url}/healthz"))
                assert status == 200 and took < 3.0, (status, took)
        assert [future.result() for future in waiting] == [202] * 16  # still queued: 202


def test_the_gate_answers_503_with_retry_after_when_every_slot_is_taken() -> None:
    async def scenario() -> None:
        gate = Gate(1, wait_s=0.05)
        async with gate.admit() as slot:
            with pytest.raises(Overloaded) as refused:
                async with gate.admit():
                    pass
            assert refused.value.status_code == 503
            assert refused.value.headers == {"Retry-After": "2"}
            slot.release()  # given back early: the next request gets in
            async with gate.admit():
                pass

    # in a thread of its own: a browser test's driver may keep an event loop in this one
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(asyncio.run, scenario()).result()
