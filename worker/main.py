"""The worker loop: claim a job, keep its lease alive, grade it, write the result once."""

import logging
import os
import signal
import socket
import threading
import time
import uuid

from sqlalchemy.exc import SQLAlchemyError

from gradlab import doorbell, queue
from gradlab.config import Settings
from gradlab.content.store import ContentStore
from gradlab.db import init_db, make_engine, session_scope
from gradlab.heartbeat import Heartbeat, WorkerStats
from gradlab.logs import fields
from gradlab.results import Timings
from gradlab.webhooks import Dispatcher
from worker.graders import warm_up
from worker.grading import Runner, grade, has_gpu
from worker.pool import WarmPool, run_in_sandbox

log = logging.getLogger("gradlab.worker")
DB_RETRY_S = 2.0


def _keep_lease(
    engine,
    job_id: int,
    worker_id: str,
    settings: Settings,  # type: ignore[no-untyped-def]
    done: threading.Event,
) -> None:
    while not done.wait(settings.lease_s / 3):
        with session_scope(engine) as session:
            if not queue.renew(
                session=session, job_id=job_id, worker_id=worker_id, lease_s=settings.lease_s
            ):
                log.warning("job %s: lease lost", job_id)
                return


def run_worker(
    *, settings: Settings, stop: threading.Event | None = None, max_jobs: int | None = None
) -> int:
    """Grade jobs until `stop` is set (SIGTERM/SIGINT set it too) or `max_jobs` are done."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    engine = make_engine(settings)
    init_db(engine)
    contents = ContentStore(settings.content_dir, check_interval_s=settings.content_reload_s)
    warm_up()
    pool = None
    runner: Runner = run_in_sandbox
    if settings.sandbox == "pool":
        use_gpu = settings.device != "cpu" and has_gpu()
        pool = WarmPool(settings, slots=settings.pool_slots, use_gpu=use_gpu)
        runner = pool.run
    stats = WorkerStats()
    heartbeat = Heartbeat(
        engine,
        worker_id=worker_id,
        slots=settings.pool_slots if pool is not None else 1,
        device="cuda" if settings.device != "cpu" and has_gpu() else "cpu",
        stats=stats,
        interval_s=settings.heartbeat_s,
        retention_s=settings.heartbeat_retention_s,
    )
    heartbeat.start()
    # result webhooks: outbox rows leased like jobs, off the grading path (gradlab/webhooks.py)
    dispatcher = Dispatcher(engine, settings).start() if settings.webhook_dispatch else None
    log.info(
        "worker %s ready (%s sandbox)",
        worker_id,
        settings.sandbox,
        extra=fields(event="worker_ready", worker_id=worker_id),
    )
    bell = doorbell.Doorbell(settings, doorbell.WORKER)
    graded = 0
    while not stop.is_set() and (max_jobs is None or graded < max_jobs):
        try:
            with session_scope(engine) as session:
                job = queue.claim(
                    session=session,
                    worker_id=worker_id,
                    lease_s=settings.lease_s,
                    max_attempts=settings.max_attempts,
                )
        except SQLAlchemyError:
            # The database is briefly unreachable or locked: wait and try again, never die.
            log.exception("claiming a job failed; retrying")
            stop.wait(DB_RETRY_S)
            continue
        if job is None:
            contents.get()  # its look for edits (a fingerprint of every file) while idle
            bell.wait(settings.poll_interval_s)  # the web rings when it stores a submission
            continue
        claimed_at = time.time()
        stats.claimed(job.job_id, job.submission_id)
        job_fields = fields(submission_id=job.submission_id, job_id=job.job_id, worker_id=worker_id)
        log.info(
            "claimed",
            extra={
                **job_fields,
                "event": "claim",
                "exercise": job.exercise,
                "attempt": job.attempts,
            },
        )
        done = threading.Event()
        keeper = threading.Thread(
            target=_keep_lease, args=(engine, job.job_id, worker_id, settings, done), daemon=True
        )
        keeper.start()
        try:
            result = grade(
                runner=runner,
                content=contents.get(),
                settings=settings,
                exercise=job.exercise,
                code=job.code,
                locale=job.locale,
            )
        except Exception as exc:
            # A fault on our side (the learner's code cannot raise here): the job goes back
            # to the queue, or dead with this reason after max_attempts. The worker lives on.
            log.exception("grading failed", extra={**job_fields, "event": "grade_error"})
            try:
                with session_scope(engine) as session:
                    queue.fail(
                        session=session,
                        job_id=job.job_id,
                        worker_id=worker_id,
                        error=f"{type(exc).__name__}: {exc}",
                        max_attempts=settings.max_attempts,
                    )
            except SQLAlchemyError:  # the lease will expire and the job be leased again
                log.exception("giving the job back failed", extra=job_fields)
            continue
        finally:
            done.set()
            keeper.join()
        finished_at = time.time()
        result.timings = Timings(
            queued_s=round(claimed_at - job.created_at, 4),
            run_s=result.timings.run_s,
            total_s=round(finished_at - job.created_at, 4),
        )
        with session_scope(engine) as session:
            stored = queue.finish(
                session=session, job_id=job.job_id, worker_id=worker_id, result=result
            )
        if stored:
            # the requests held for this result look now, not at their next poll
            doorbell.ring(settings, doorbell.WEB, job.submission_id.encode())
            stats.finished(result.status, result.timings.total_s, result.timings.run_s)
        log.info(
            "finished",
            extra={
                **job_fields,
                "event": "finish",
                "status": result.status,
                "accepted": stored,  # False: the lease was lost, another worker grades it
                "total_s": result.timings.total_s,
            },
        )
        graded += 1
    bell.close()
    heartbeat.stop()
    if dispatcher is not None:
        dispatcher.stop(timeout_s=settings.webhook_timeout_s + 1)
    if pool is not None:
        pool.close()
    engine.dispose()
    return graded
