"""The worker loop: claim a job, keep its lease alive, grade it, write the result once."""

import logging
import os
import signal
import socket
import threading
import time
import uuid

from sqlalchemy.exc import SQLAlchemyError

from gradlab import queue
from gradlab.config import Settings
from gradlab.content.loader import load_content
from gradlab.db import init_db, make_engine, session_scope
from gradlab.results import Timings
from worker.graders import warm_up
from worker.grading import Runner, grade, has_gpu
from worker.pool import WarmPool
from worker.sandbox import run_in_sandbox

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
    content = load_content(settings.content_dir)
    warm_up()
    pool = None
    runner: Runner = run_in_sandbox
    if settings.sandbox == "pool":
        use_gpu = settings.device != "cpu" and has_gpu()
        pool = WarmPool(settings, slots=settings.pool_slots, use_gpu=use_gpu)
        runner = pool.run
    log.info("worker %s ready (%s sandbox)", worker_id, settings.sandbox)
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
            stop.wait(settings.poll_interval_s)
            continue
        claimed_at = time.time()
        log.info("job %s (submission %s, %s): start", job.job_id, job.submission_id, job.exercise)
        done = threading.Event()
        keeper = threading.Thread(
            target=_keep_lease, args=(engine, job.job_id, worker_id, settings, done), daemon=True
        )
        keeper.start()
        try:
            result = grade(
                runner=runner,
                content=content,
                settings=settings,
                exercise=job.exercise,
                code=job.code,
                locale=job.locale,
            )
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
        log.info("job %s: %s%s", job.job_id, result.status, "" if stored else " (lease lost)")
        graded += 1
    if pool is not None:
        pool.close()
    engine.dispose()
    return graded
