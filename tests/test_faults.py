"""Queue semantics under faults, with real processes, on SQLite and on PostgreSQL.

Per database: one `gradlab serve --workers 0` (web only) and 4 worker processes
(tests/fault_worker.py: the real worker loop and warm sandbox, plus faults injected by marker
comments), restarted when they die like a process supervisor would. Leases are short (2 s) and
a job gets 2 attempts. The tests run in file order on the same cluster:

1. 500 jobs on 4 workers: every submission ends with exactly one result; each job's `finish` was
   accepted exactly once (from the workers' JSON logs); the drain rate is printed.
2. A worker SIGKILLed mid-job: its job is re-leased once the lease expires and finished by
   another worker (the re-lease time is printed).
3. A job that kills every worker that takes it, and one whose grading raises: both go `dead`
   with their reason, which the API shows as an `internal_error` result.
4. SIGKILL the web process while jobs are pending and start it again: nothing is lost, the
   pending jobs are graded, the earlier results are still there.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text
from sqlmodel import Session, select

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.db import init_db, make_engine
from gradlab.models import Job, Submission
from tests.fault_worker import FAULT_CRASH, FAULT_HOLD, FAULT_RAISE
from tests.pg import BOTH_DATABASES, PostgresServer, free_port

pytestmark = pytest.mark.slow

EXERCISE = "gradient-accumulation/accumulate"
CORPUS = Path(__file__).parent / "corpus" / "accumulate"
CORRECT = (CORPUS / "canonical.py").read_text()
WRONG = (CORPUS / "unscaled.py").read_text()
WORKERS = 4
JOBS = 500
LEASE_S = 2.0
MAX_ATTEMPTS = 2
HOLD_S = 1.5


class Cluster:
    """A web process and supervised worker processes sharing one database."""

    def __init__(self, root: Path, database_url: str | None, backend: str) -> None:
        self.root = root
        self.backend = backend
        self.settings = Settings(
            data_dir=root / "data", database_url=database_url, secret_key="fault-test"
        )
        self.env = {
            **os.environ,
            "GRADLAB_DATA_DIR": str(self.settings.data_dir),
            "GRADLAB_SECRET_KEY": "fault-test",
            "GRADLAB_LEASE_S": str(LEASE_S),
            "GRADLAB_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
            "GRADLAB_POLL_INTERVAL_S": "0.05",
            "GRADLAB_HEARTBEAT_S": "1",
            "GRADLAB_LOG_FORMAT": "json",
            "GRADLAB_DEVICE": "cpu",
            "GRADLAB_POOL_SLOTS": "1",
            "GRADLAB_CONTENT_RELOAD_S": "0",
            # one test learner keeps a dozen jobs waiting across a restart (tests/test_admission.py
            # covers the caps)
            "GRADLAB_MAX_PENDING_PER_LEARNER": "100",
            "GRADLAB_MAX_PENDING_PER_ADDRESS": "100",
            "GRADLAB_SUBMISSION_RATE_LIMIT": "100000",
            "GRADLAB_TEST_HOLD_S": str(HOLD_S),
        }
        if database_url:
            self.env["GRADLAB_DATABASE_URL"] = database_url
        self.engine: Engine = make_engine(self.settings)
        init_db(self.engine)
        self.workers: list[subprocess.Popen] = []
        self.started_workers = 0
        self.web: subprocess.Popen | None = None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._supervising = threading.Event()
        self._lock = threading.Lock()

    # processes
    def _spawn(self, command: list[str], log_name: str) -> subprocess.Popen:
        with (self.root / log_name).open("ab") as log:
            return subprocess.Popen(
                command, cwd=PROJECT_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def start_worker(self) -> subprocess.Popen:
        with self._lock:
            self.started_workers += 1
            name = f"worker-{self.started_workers}.log"
        return self._spawn([sys.executable, "-m", "tests.fault_worker"], name)

    def start_workers(self) -> None:
        self.workers = [self.start_worker() for _ in range(WORKERS)]
        self._supervising.set()
        threading.Thread(target=self._supervise, daemon=True).start()

    def _supervise(self) -> None:
        """Restart dead workers, like `restart: unless-stopped` or `gradlab serve` would."""
        while self._supervising.wait(0.2) and self._supervising.is_set():
            for index, process in enumerate(self.workers):
                if process.poll() is not None and self._supervising.is_set():
                    self.workers[index] = self.start_worker()

    def stop(self) -> None:
        self._supervising.clear()
        processes = [*self.workers, *([self.web] if self.web else [])]
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        self.engine.dispose()

    def start_web(self) -> None:
        command = [sys.executable, "-m", "gradlab.cli", "serve", "--workers", "0"]
        command += ["--port", str(self.port)]
        self.web = self._spawn(command, "web.log")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.web.poll() is None, self.log("web.log")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        pytest.fail(f"web did not start: {self.log('web.log')}")

    def log(self, name: str) -> str:
        return (self.root / name).read_text(errors="replace")[-4000:]

    def wait_for_workers(self, n: int, timeout_s: float = 120) -> float:
        """Until n workers beat (they beat once their sandbox pool is warm); seconds waited."""
        started = time.monotonic()
        while self.sql("SELECT count(*) FROM worker_heartbeat WHERE stopped_at IS NULL") < n:
            assert time.monotonic() - started < timeout_s, "workers did not start"
            time.sleep(0.1)
        return time.monotonic() - started

    # database
    def sql(self, statement: str, **params: Any) -> Any:
        with Session(self.engine) as session:
            return session.execute(text(statement), params).scalar()

    def job_of(self, submission_id: str) -> Job:
        with Session(self.engine) as session:
            job = session.exec(select(Job).where(Job.submission_id == submission_id)).one()
            session.expunge(job)
            return job

    def log_events(self, event: str) -> list[dict[str, Any]]:
        """The workers' JSON log lines of one event."""
        events = []
        for path in sorted(self.root.glob("worker-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{") and f'"event": "{event}"' in line:
                    events.append(json.loads(line))
        return events

    def worker_errors(self) -> str:
        """The workers' logged errors and tracebacks (for a failing assertion's message)."""
        lines = [
            line
            for path in sorted(self.root.glob("worker-*.log"))
            for line in path.read_text(errors="replace").splitlines()
            if not line.startswith("{") or '"level": "error"' in line
        ]
        return "\n".join(lines)[-6000:]


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    backend = request.param
    url = None
    server: PostgresServer | None = None
    if backend == "postgresql":
        server = request.getfixturevalue("postgres_server")
        url = server.create_database()
    started = time.monotonic()
    cluster = Cluster(tmp_path_factory.mktemp(f"faults-{backend}"), url, backend)
    cluster.start_workers()
    cluster.start_web()
    ready_s = cluster.wait_for_workers(WORKERS)
    print(f"\n[{backend}] web + {WORKERS} workers ready in {time.monotonic() - started:.1f} s")
    yield cluster
    cluster.stop()
    print(
        f"[{backend}] fault tests took {time.monotonic() - started:.1f} s (startup {ready_s:.1f} s)"
    )
    if server is not None and url is not None:
        server.drop_database(url)


def _browser(cluster: Cluster) -> httpx.Client:
    return httpx.Client(base_url=cluster.url, timeout=30)


def _submit(client: httpx.Client, code: str) -> str:
    response = client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": code})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _wait_done(client: httpx.Client, ids: list[str], timeout_s: float) -> dict[str, dict]:
    deadline = time.monotonic() + timeout_s
    done: dict[str, dict] = {}
    while len(done) < len(ids):
        assert time.monotonic() < deadline, f"{len(ids) - len(done)} submissions never finished"
        for submission_id in ids:
            if submission_id not in done:
                body = client.get(f"/api/v1/submissions/{submission_id}").json()
                if body["status"] not in ("queued", "running"):
                    done[submission_id] = body
        time.sleep(0.2)
    return done


def test_500_jobs_on_4_workers_each_end_with_exactly_one_result(cluster: Cluster) -> None:
    # Every tenth job is fully graded (a correct or a wrong loop); the others are syntax errors
    # on a line of their own, so that every result says which submission it belongs to while
    # the queue, not the grader, is what 500 jobs exercise.
    expected: dict[str, tuple[str, int | None]] = {}
    with Session(cluster.engine) as session:  # one transaction: the workers see all at once
        for i in range(JOBS):
            if i % 10 == 0:
                code, verdict = (
                    (CORRECT, ("passed", None)) if i % 20 == 0 else (WRONG, ("failed", None))
                )
            else:
                line = i % 97 + 1
                code, verdict = "\n" * (line - 1) + "loss = (\n", ("error", line)
            submission = Submission(
                exercise=EXERCISE, code=code + f"\n# {i}\n", owner="learner:fault-test"
            )
            session.add(submission)
            session.flush()
            session.add(Job(submission_id=submission.id))
            expected[submission.id] = verdict
        session.commit()
    started = time.monotonic()
    while (
        left := cluster.sql("SELECT count(*) FROM job WHERE status IN ('queued', 'leased')")
    ) > 0:
        assert time.monotonic() - started < 240, f"{left} jobs still not done"
        time.sleep(0.2)
    elapsed = time.monotonic() - started
    rate = JOBS / elapsed
    print(
        f"\n[{cluster.backend}] drained {JOBS} jobs on {WORKERS} workers: {elapsed:.1f} s, "
        f"{rate:.1f} jobs/s"
    )

    with Session(cluster.engine) as session:
        submissions = {s.id: s for s in session.exec(select(Submission)).all()}
        jobs = session.exec(select(Job)).all()
    assert len(jobs) == JOBS and {j.submission_id for j in jobs} == set(expected)
    assert {j.status for j in jobs} == {"done"}
    for submission_id, (status, line) in expected.items():
        submission = submissions[submission_id]
        assert submission.result_json, submission
        result = json.loads(submission.result_json)
        assert (result["error"] or {}).get("kind") != "internal_error", cluster.worker_errors()
        assert submission.status == status, result
        assert result["status"] == status
        assert (result["error"] or {}).get("line") == line
    accepted = Counter(e["job_id"] for e in cluster.log_events("finish") if e["accepted"])
    assert set(accepted) == {j.id for j in jobs}, "a job's finish was never accepted"
    assert max(accepted.values()) == 1, "a job's finish was accepted twice"
    claims = Counter(e["job_id"] for e in cluster.log_events("claim"))
    print(f"[{cluster.backend}] jobs claimed more than once: {sum(c > 1 for c in claims.values())}")
    by_worker = Counter(e["worker_id"] for e in cluster.log_events("finish") if e["accepted"])
    assert len(by_worker) == WORKERS, f"not every worker graded: {by_worker}"

    metrics = httpx.get(f"{cluster.url}/metrics", timeout=10).text
    assert 'gradlab_jobs{status="done"} 500.0' in metrics
    assert "gradlab_queue_depth 0.0" in metrics
    time.sleep(1.5)  # one heartbeat: the workers' histograms include the last jobs
    metrics = httpx.get(f"{cluster.url}/metrics", timeout=10).text
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("gradlab_grade_latency_seconds_count{")
    )
    assert counted == JOBS
    assert f"gradlab_workers_up {WORKERS}.0" in metrics


def _worker_pid(lease_owner: str) -> int:
    return int(lease_owner.split(":")[-2])  # host:pid:random (worker/main.py)


def test_a_worker_killed_mid_job_has_its_job_re_leased_and_finished(cluster: Cluster) -> None:
    with _browser(cluster) as client:
        submission_id = _submit(client, CORRECT + f"\n{FAULT_HOLD}\n")
        deadline = time.monotonic() + 30
        while (job := cluster.job_of(submission_id)).status != "leased":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        victim = _worker_pid(job.lease_owner)
        assert victim in {w.pid for w in cluster.workers}
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        while (again := cluster.job_of(submission_id)).attempts < 2:
            assert time.monotonic() - killed < 30, "the job was never leased again"
            time.sleep(0.02)
        released_s = time.monotonic() - killed
        (body,) = _wait_done(client, [submission_id], 60).values()
        finished_s = time.monotonic() - killed
    assert again.lease_owner != job.lease_owner and _worker_pid(again.lease_owner) != victim
    assert body["status"] == "passed"
    assert cluster.job_of(submission_id).status == "done"
    accepted = [e for e in cluster.log_events("finish") if e["submission_id"] == submission_id]
    assert [e["worker_id"] for e in accepted if e["accepted"]] == [again.lease_owner]
    print(
        f"\n[{cluster.backend}] SIGKILLed worker's job re-leased after {released_s:.2f} s "
        f"(lease {LEASE_S} s), finished after {finished_s:.2f} s"
    )
    assert released_s >= LEASE_S * 0.5  # not before the (already partly run) lease expired


def test_a_job_that_keeps_failing_goes_dead_with_its_reason(cluster: Cluster) -> None:
    pids_before = {w.pid for w in cluster.workers}
    with _browser(cluster) as client:
        crasher = _submit(client, CORRECT + f"\n{FAULT_CRASH}\n")
        raiser = _submit(client, CORRECT + f"\n{FAULT_RAISE}\n")
        started = time.monotonic()
        results = _wait_done(client, [crasher, raiser], 90)
        print(
            f"\n[{cluster.backend}] both faulty jobs dead after {time.monotonic() - started:.1f} s"
        )

    crashed = results[crasher]
    assert crashed["status"] == "error"
    assert crashed["result"]["error"]["kind"] == "internal_error"
    assert f"worker lost the job {MAX_ATTEMPTS} times" in crashed["result"]["error"]["message"]
    job = cluster.job_of(crasher)
    assert job.status == "dead" and job.attempts == MAX_ATTEMPTS
    assert job.last_error == f"worker lost the job {MAX_ATTEMPTS} times"

    raised = results[raiser]
    assert raised["status"] == "error"
    assert raised["result"]["error"]["kind"] == "internal_error"
    assert "RuntimeError: injected fault" in raised["result"]["error"]["message"]
    job = cluster.job_of(raiser)
    assert job.status == "dead" and job.attempts == MAX_ATTEMPTS
    assert (
        job.last_error == f"failed {MAX_ATTEMPTS} times; last error: RuntimeError: injected fault"
    )
    # the crashing job took a worker with it on each attempt; the raising one took none
    claims = Counter(e["submission_id"] for e in cluster.log_events("claim"))
    assert claims[crasher] == MAX_ATTEMPTS and claims[raiser] == MAX_ATTEMPTS
    assert len(pids_before - {w.pid for w in cluster.workers}) >= 1
    grade_errors = [e for e in cluster.log_events("grade_error") if e["submission_id"] == raiser]
    assert len(grade_errors) == MAX_ATTEMPTS


def test_restarting_the_web_process_loses_nothing(cluster: Cluster) -> None:
    with _browser(cluster) as client:
        earlier = _submit(client, CORRECT)
        _wait_done(client, [earlier], 60)
        pending = [_submit(client, WRONG + f"\n{FAULT_HOLD}\n# {i}\n") for i in range(12)]
        assert cluster.web is not None
        cluster.web.kill()  # SIGKILL: no shutdown handler runs
        cluster.web.wait()
        assert cluster.sql("SELECT count(*) FROM job WHERE status IN ('queued', 'leased')") > 0
        cluster.start_web()
        # the learner cookie (signed with the same secret key) still owns its submissions
        results = _wait_done(client, [earlier, *pending], 90)
    assert results[earlier]["status"] == "passed"
    assert {results[i]["status"] for i in pending} == {"failed"}
    assert all(results[i]["result"]["checks"] for i in pending)
