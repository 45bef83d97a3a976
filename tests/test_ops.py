"""Operations: /healthz, /metrics (Prometheus text), worker heartbeats, structured logs,
`gradlab serve --workers 0`."""

import json
import logging
import subprocess
import sys
import time

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine
from sqlmodel import Session

from app.main import create_app
from gradlab import queue
from gradlab.config import PROJECT_ROOT, Settings
from gradlab.db import init_db, make_engine
from gradlab.heartbeat import LATENCY_BUCKETS, Heartbeat, Histogram, WorkerStats
from gradlab.logs import JsonFormatter, TextFormatter, fields
from gradlab.models import WorkerHeartbeat
from gradlab.results import Check, GradeResult
from tests.pg import both_databases

EXERCISE = "gradient-accumulation/accumulate"


def _families(text: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text)}


@both_databases
def test_healthz_answers_ok_when_the_database_answers(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["database"] == "ok"


def test_healthz_is_503_when_the_database_is_gone(settings: Settings) -> None:
    app = create_app(settings)
    with TestClient(app) as client:
        app.state.health_engine.dispose()
        # a server that is not there: port 9 (discard) on localhost refuses the connection
        app.state.health_engine = create_engine(
            "postgresql+psycopg://nobody@127.0.0.1:9/none", connect_args={"connect_timeout": 2}
        )
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["status"] == "error" and response.json()["database"].startswith("error")


@both_databases
def test_metrics_report_queue_jobs_submissions_and_workers(
    client: TestClient, settings: Settings
) -> None:
    for _ in range(3):
        assert (
            client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}).status_code
            == 202
        )
    engine = make_engine(settings)
    init_db(engine)
    with Session(engine) as session:  # one job graded, as a worker would
        job = queue.claim(session=session, worker_id="w1", lease_s=30, max_attempts=3)
        result = GradeResult.from_checks(
            [Check(id="c", passed=True, points=1, max_points=1, message="")]
        )
        assert queue.finish(session=session, job_id=job.job_id, worker_id="w1", result=result)
    stats = WorkerStats()
    stats.claimed(job.job_id, job.submission_id)
    stats.finished("passed", latency_s=0.3, run_s=0.07)
    beat = Heartbeat(engine, worker_id="host-a:1:abc", slots=2, device="cpu", stats=stats,
                     interval_s=60, retention_s=3600)  # fmt: skip
    beat.beat()

    # no metrics token: /metrics answers loopback clients only (tests/test_ops_limits.py)
    local = TestClient(client.app, client=("127.0.0.1", 50000))
    response = local.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = _families(response.text)  # parses: the exposition format is valid
    assert families["gradlab_queue_depth"].samples[0].value == 2
    jobs = {s.labels["status"]: s.value for s in families["gradlab_jobs"].samples}
    assert jobs == {"queued": 2, "leased": 0, "done": 1, "dead": 0}
    subs = {s.labels["status"]: s.value for s in families["gradlab_submissions"].samples}
    assert subs["queued"] == 2 and subs["passed"] == 1
    assert families["gradlab_workers_up"].samples[0].value == 1
    (age,) = families["gradlab_worker_last_seen_age_seconds"].samples
    assert age.labels == {"worker": "host-a:1:abc", "host": beat.row.host} and 0 <= age.value < 60
    latency = {
        (s.name, s.labels.get("le")): s.value
        for s in families["gradlab_grade_latency_seconds"].samples
    }
    assert latency[("gradlab_grade_latency_seconds_bucket", "0.25")] == 0
    assert latency[("gradlab_grade_latency_seconds_bucket", "0.5")] == 1
    assert latency[("gradlab_grade_latency_seconds_bucket", "+Inf")] == 1
    assert latency[("gradlab_grade_latency_seconds_count", None)] == 1
    assert latency[("gradlab_grade_latency_seconds_sum", None)] == 0.3

    beat.beat(stopped=True)
    families = _families(local.get("/metrics").text)
    assert families["gradlab_workers_up"].samples[0].value == 0
    with Session(engine) as session:
        row = session.get(WorkerHeartbeat, "host-a:1:abc")
        assert row.stopped_at is not None and row.last_job_id == job.job_id and row.jobs_done == 1
    engine.dispose()


def test_metrics_token_guards_metrics(settings: Settings) -> None:
    settings.metrics_token = "s3cret"
    with TestClient(create_app(settings)) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        ok = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and "gradlab_queue_depth" in ok.text


def test_histogram_buckets_are_cumulative_and_end_with_inf() -> None:
    histogram = Histogram()
    for value in (0.01, 0.2, 0.2, 1000):
        histogram.observe(value)
    buckets = dict(histogram.cumulative())
    assert len(buckets) == len(LATENCY_BUCKETS) + 1
    assert buckets["0.05"] == 1 and buckets["0.25"] == 3 and buckets["300.0"] == 3
    assert buckets["+Inf"] == 4 and histogram.count == 4


def test_old_heartbeat_rows_are_pruned(settings: Settings) -> None:
    engine = make_engine(settings)
    init_db(engine)
    with Session(engine) as session:
        session.add(WorkerHeartbeat(worker_id="gone", host="h", pid=1, slots=1, device="cpu",
                                    started_at=0, last_seen=time.time() - 7200))  # fmt: skip
        session.commit()
    Heartbeat(engine, worker_id="new", slots=1, device="cpu", stats=WorkerStats(), interval_s=5,
              retention_s=3600).beat()  # fmt: skip
    with Session(engine) as session:
        assert session.get(WorkerHeartbeat, "gone") is None
        assert session.get(WorkerHeartbeat, "new") is not None
    engine.dispose()


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("gradlab.worker", logging.INFO, __file__, 1, "claimed", None, None)
    record.__dict__.update(extra)
    return record


def test_log_lines_carry_submission_and_job_ids_in_json_and_text() -> None:
    extra = fields(event="claim", submission_id="abc", job_id=7, missing=None)
    line = json.loads(JsonFormatter().format(_record(**extra)))
    assert line["event"] == "claim" and line["submission_id"] == "abc" and line["job_id"] == 7
    assert line["message"] == "claimed" and line["level"] == "info" and "missing" not in line
    text = TextFormatter().format(_record(**extra, note="two words"))
    assert "claimed event=claim submission_id=abc job_id=7" in text and 'note="two words"' in text


def test_enqueue_logs_submit_with_both_ids(settings: Settings, caplog) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(settings)
    init_db(engine)
    with caplog.at_level(logging.INFO, logger="gradlab.queue"), Session(engine) as session:
        submission = queue.enqueue(
            session=session, exercise=EXERCISE, code="x", locale="en", owner="o"
        )
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "submit"]
    assert record.submission_id == submission.id and isinstance(record.job_id, int)
    engine.dispose()


def test_serve_rejects_negative_workers() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "gradlab.cli", "serve", "--workers", "-1"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert completed.returncode == 2 and "--workers" in completed.stderr


def test_every_request_is_logged_with_its_status_and_duration(client: TestClient, caplog) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.INFO, logger="gradlab.access"):
        client.get("/api/v1/submissions?cursor=secret-cursor")  # a 422 from the route
        client.post(  # refused by the body-limit middleware, before any route
            "/api/v1/submissions",
            content=b"{}",
            headers={"Content-Length": str(10**9), "Content-Type": "application/json"},
        )
        client.get("/healthz")
    lines = [vars(r) for r in caplog.records if getattr(r, "event", None) == "request"]
    assert [(r["method"], r["path"], r["status"]) for r in lines] == [
        ("GET", "/api/v1/submissions", 422),
        ("POST", "/api/v1/submissions", 413),
        ("GET", "/healthz", 200),
    ]
    assert all(isinstance(r["ms"], float) and 0 <= r["ms"] < 10_000 for r in lines)
    assert "secret-cursor" not in caplog.text  # never the query string
