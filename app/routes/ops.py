"""Operations: `GET /healthz` (can this instance do its work? app/health.py) and `GET /metrics`
(Prometheus).

Everything /metrics reports comes from the database, because the web process grades nothing and
there may be many web and worker processes on many hosts: queue depth and jobs/submissions by
status are counted at scrape time; each worker's own counters and latency histograms come from
its `worker_heartbeat` row (gradlab/heartbeat.py), labelled with its id.

/metrics names hosts, pids and traffic, so it is never open: with `GRADLAB_METRICS_TOKEN` set it
needs that bearer token; without one it answers only clients on loopback (a scraper on the host).
"""

import hmac
import ipaddress
import time
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func
from sqlmodel import Session, select

from app.health import run_checks
from gradlab.heartbeat import parse_stats, read_heartbeats
from gradlab.models import Job, JobStatus, Submission, SubmissionStatus

router = APIRouter(tags=["operations"])
VERSION = "0.1.0"


@router.get("/healthz")
def healthz(request: Request) -> JSONResponse:
    """200 when every check passes (app/health.py: a database write, the SQLite file's identity,
    free disk, live workers where expected); 503 naming each failing part otherwise."""
    state = request.app.state
    started = time.perf_counter()
    checks = run_checks(
        engine=state.health_engine, settings=state.settings, opened=state.database_identity
    )
    healthy = all(check.ok for check in checks)
    database = next(check for check in checks if check.name == "database")
    body = {
        "status": "ok" if healthy else "error",
        "database": "ok" if database.ok else f"error: {database.detail}",
        "checks": {check.name: {"ok": check.ok, "detail": check.detail} for check in checks},
        "failing": [check.name for check in checks if not check.ok],
        "database_ms": round((time.perf_counter() - started) * 1000, 2),
        "version": VERSION,
    }
    return JSONResponse(body, status_code=200 if healthy else 503)


NO_TOKEN_DETAIL = (
    "/metrics answers only loopback clients while no token is configured: set"
    " GRADLAB_METRICS_TOKEN (16+ characters) and send `Authorization: Bearer <token>`"
)


# headers a reverse proxy adds: a relayed request's loopback peer is the proxy, not the client
RELAY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")


def _from_loopback(request: Request) -> bool:
    """Whether the client is on this host: a loopback peer (127.0.0.0/8, ::1, ::ffff:127.x on
    dual stack) that is not relaying for someone else."""
    if any(name in request.headers for name in RELAY_HEADERS):
        return False
    host = request.client.host if request.client else ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:  # a unix socket, a test client's name: not provably local
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text exposition format: bearer token when one is set, else loopback only."""
    # blank counts as unset here too (settings validate it; this also covers settings changed
    # after validation), so `Authorization: Bearer ` with nothing after it never matches
    token = (request.app.state.settings.metrics_token or "").strip()
    if token:
        given = request.headers.get("authorization", "")
        # constant time: the comparison must not leak how much of the token was right
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return JSONResponse({"detail": "metrics need the bearer token"}, status_code=401)
    elif not _from_loopback(request):
        return JSONResponse({"detail": NO_TOKEN_DETAIL}, status_code=403)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(request.app.state.engine, request.app.state.settings))
    # after the token check: a scrape's queries take one of the database slots like any
    # request's (app/admission.py), so a stream of scrapes cannot starve the pool
    async with request.app.state.db_gate.admit():
        exposition = await run_in_threadpool(generate_latest, registry)
    return Response(exposition, media_type=CONTENT_TYPE_LATEST)


class DatabaseCollector(Collector):
    """Reads the queue, the submissions and the workers' heartbeats at scrape time."""

    def __init__(self, engine: Engine, settings: Any) -> None:
        self.engine = engine
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        with Session(self.engine) as session:
            jobs = _counts(session, Job, JobStatus)
            submissions = _counts(session, Submission, SubmissionStatus)
            oldest = session.exec(
                select(func.min(Job.created_at)).where(Job.status == JobStatus.queued)
            ).one()
            expired = session.exec(
                select(func.count())
                .select_from(Job)
                .where(Job.status == JobStatus.leased, Job.lease_expires_at < now)  # type: ignore[operator]
            ).one()
            workers = read_heartbeats(session)

        yield GaugeMetricFamily(
            "gradlab_queue_depth", "Jobs waiting for a worker (status queued).", jobs["queued"]
        )
        yield GaugeMetricFamily(
            "gradlab_queue_oldest_age_seconds",
            "Age of the oldest queued job; 0 when none waits.",
            now - oldest if oldest is not None else 0.0,
        )
        yield GaugeMetricFamily(
            "gradlab_jobs_lease_expired",
            "Leased jobs whose lease expired (their worker died); re-leased on the next claim.",
            expired,
        )
        yield _by_status("gradlab_jobs", "Grading jobs by status.", jobs)
        yield _by_status("gradlab_submissions", "Submissions by status.", submissions)
        yield from self._workers(workers, now)

    def _workers(self, rows: Iterable[Any], now: float) -> Iterator[Metric]:
        alive_after = now - 3 * self.settings.heartbeat_s
        labels = ["worker", "host"]
        age = GaugeMetricFamily(
            "gradlab_worker_last_seen_age_seconds",
            "Seconds since the worker last wrote its heartbeat.",
            labels=labels,
        )
        slots = GaugeMetricFamily(
            "gradlab_worker_slots", "Sandbox slots of the worker.", labels=labels
        )
        up = GaugeMetricFamily(
            "gradlab_worker_up",
            "1 if the worker beat within 3 heartbeat intervals and has not stopped.",
            labels=labels,
        )
        results = CounterMetricFamily(
            "gradlab_worker_jobs",
            "Jobs the worker graded and stored, by result status.",
            labels=[*labels, "status"],
        )
        latency = HistogramMetricFamily(
            "gradlab_grade_latency_seconds",
            "Submitted to result stored (queue wait + grading), observed by the worker.",
            labels=labels,
        )
        run = HistogramMetricFamily(
            "gradlab_grade_run_seconds",
            "The sandboxed run of one job, observed by the worker.",
            labels=labels,
        )
        alive = 0
        for row in rows:
            key = [row.worker_id, row.host]
            is_up = row.stopped_at is None and row.last_seen >= alive_after
            alive += is_up
            age.add_metric(key, max(0.0, now - row.last_seen))
            slots.add_metric(key, row.slots)
            up.add_metric(key, 1 if is_up else 0)
            latency_h, run_h, by_status = parse_stats(row.stats_json)
            for status in ("passed", "failed", "error"):
                results.add_metric([*key, status], by_status.get(status, 0))
            latency.add_metric(key, latency_h.cumulative(), latency_h.total)
            run.add_metric(key, run_h.cumulative(), run_h.total)
        yield GaugeMetricFamily("gradlab_workers_up", "Workers beating now.", alive)
        yield from (up, age, slots, results, latency, run)


def _counts(session: Session, table: Any, statuses: Any) -> dict[str, int]:
    rows = session.exec(select(table.status, func.count()).group_by(table.status)).all()
    counts = {str(status): 0 for status in statuses}
    counts.update({str(status): count for status, count in rows})
    return counts


def _by_status(name: str, documentation: str, counts: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["status"])
    for status, count in counts.items():
        family.add_metric([status], count)
    return family
