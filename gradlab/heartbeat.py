"""Worker heartbeats and the workers' own metrics, kept in the `worker_heartbeat` table.

Every worker process rewrites its row every `heartbeat_s`: host, pid, slots, last job, and its
counters (jobs by result status, histograms of the grade latency and of the sandboxed run). The
web process, which does not grade, reads the rows for /metrics and labels each series with the
worker id. This is correct for any number of processes on any number of hosts: a worker's
counters only grow while it lives, a restarted worker is a new id (a new series, which is how
Prometheus treats a restarted process), and the database is the one place every process reaches.
A row loses at most `heartbeat_s` of observations when its worker is SIGKILLed. Rows not written
for `heartbeat_retention_s` are deleted by the next worker that beats.

Imported by the worker and by the web app: no torch, no FastAPI here.
"""

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, delete
from sqlmodel import Session, select

from gradlab.models import WorkerHeartbeat

log = logging.getLogger("gradlab.heartbeat")

# seconds; a grade through the warm pool takes ~0.1 s on CPU, a cold sandbox several seconds
LATENCY_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class Histogram:
    """Counts per bucket (not cumulative; the last one is +Inf), sum and count."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        index = next((i for i, bound in enumerate(LATENCY_BUCKETS) if value <= bound), -1)
        self.counts[index] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: (le, observations <= le), ending with +Inf."""
        running, buckets = 0, []
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), self.counts, strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return buckets

    def to_json(self) -> dict[str, Any]:
        return {"counts": self.counts, "sum": self.total, "count": self.count}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Histogram":
        counts = list(data.get("counts", []))
        if len(counts) != len(LATENCY_BUCKETS) + 1:  # buckets changed since it was written
            counts = [0] * len(LATENCY_BUCKETS) + [int(data.get("count", 0))]
        return cls(counts=counts, total=float(data.get("sum", 0.0)), count=int(data["count"]))


@dataclass
class WorkerStats:
    """What one worker has done since it started; updated by the grading loop."""

    latency: Histogram = field(default_factory=Histogram)  # submitted -> result stored
    run: Histogram = field(default_factory=Histogram)  # the sandboxed run alone
    results: dict[str, int] = field(default_factory=dict)  # result status -> count
    jobs_done: int = 0
    last_job_id: int | None = None
    last_submission_id: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def claimed(self, job_id: int, submission_id: str) -> None:
        with self.lock:
            self.last_job_id, self.last_submission_id = job_id, submission_id

    def finished(self, status: str, latency_s: float, run_s: float) -> None:
        with self.lock:
            self.jobs_done += 1
            self.results[status] = self.results.get(status, 0) + 1
            self.latency.observe(latency_s)
            self.run.observe(run_s)

    def to_json(self) -> str:
        with self.lock:
            return json.dumps(
                {
                    "latency": self.latency.to_json(),
                    "run": self.run.to_json(),
                    "results": self.results,
                }
            )


def parse_stats(stats_json: str | None) -> tuple[Histogram, Histogram, dict[str, int]]:
    data = json.loads(stats_json) if stats_json else {}
    latency = Histogram.from_json(data["latency"]) if "latency" in data else Histogram()
    run = Histogram.from_json(data["run"]) if "run" in data else Histogram()
    return latency, run, {str(k): int(v) for k, v in data.get("results", {}).items()}


class Heartbeat:
    """Writes the worker's row now and every `interval_s` from a daemon thread until stopped."""

    def __init__(
        self,
        engine: Engine,
        *,
        worker_id: str,
        slots: int,
        device: str,
        stats: WorkerStats,
        interval_s: float,
        retention_s: float,
    ) -> None:
        self.engine = engine
        self.stats = stats
        self.interval_s = interval_s
        self.retention_s = retention_s
        self.row = WorkerHeartbeat(
            worker_id=worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            slots=slots,
            device=device,
            started_at=time.time(),
            last_seen=time.time(),
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and mark the row stopped (a clean exit, not a lost worker)."""
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 5)
        self.beat(stopped=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception:  # the database is briefly away: try again next time
                log.exception("heartbeat failed")

    def beat(self, *, stopped: bool = False) -> None:
        now = time.time()
        with self.stats.lock:
            values = {
                "last_seen": now,
                "jobs_done": self.stats.jobs_done,
                "last_job_id": self.stats.last_job_id,
                "last_submission_id": self.stats.last_submission_id,
            }
        values["stats_json"] = self.stats.to_json()
        values["stopped_at"] = now if stopped else None
        with Session(self.engine) as session:
            row = session.get(WorkerHeartbeat, self.row.worker_id)
            if row is None:
                row = WorkerHeartbeat(**self.row.model_dump())
            for key, value in values.items():
                setattr(row, key, value)
            session.add(row)
            session.exec(
                delete(WorkerHeartbeat).where(
                    WorkerHeartbeat.last_seen < now - self.retention_s  # type: ignore[arg-type]
                )
            )
            session.commit()


def read_heartbeats(session: Session) -> list[WorkerHeartbeat]:
    return list(session.exec(select(WorkerHeartbeat).order_by(WorkerHeartbeat.worker_id)))
