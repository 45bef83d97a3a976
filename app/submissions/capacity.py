"""Admission of new jobs: what one sender may ask of the graders that everybody shares.

Three kinds of cap, checked before a submission is stored (429 or 503 with `Retry-After`):
- the queue (503): its depth, and the wait it means. The wait is estimated from what the
  database knows, never from the sender: the learners' jobs queued, the live workers (their
  heartbeats) and how long the workers' last jobs took (lease times the workers' trusted
  parents wrote). Past `max_queue_wait_s` a new job's result would come later than a learner
  waits for, and everybody queued behind it would wait longer still: refusing it early is what
  keeps honest learners' results within that time while a burst lasts;
- submissions waiting at once (429), per learner or account, per grader token, and per client
  address (learners behind one address together, however many cookies a script makes);
- worker time (429): the seconds workers spent on a sender's submissions of the last
  `worker_time_window_s`, per learner or account, per grader token and per client address.
  The waiting caps count jobs; this counts what the jobs cost, so a sender of endless loops (each
  holding a worker for the exercise's whole wall clock) runs out long before a sender of honest
  attempts does. The seconds are the worker's lease times (claim to result), written by the
  worker's trusted parent, never anything the learner's code reports.

Counted before the insert, so racing requests may pass a cap by a few.
"""

import math
import time
from typing import Any

from sqlalchemy import func, text
from sqlmodel import Session, col, select

from app.submissions.errors import SubmissionRefused
from gradlab.config import Settings
from gradlab.models import Job, JobStatus, Submission, SubmissionStatus

WAITING = (SubmissionStatus.queued, SubmissionStatus.running)
QUEUE_FULL_RETRY_S = 30
PENDING_RETRY_S = 10


def check_capacity(
    *, session: Session, settings: Settings, owner: str, address: str | None, count: int
) -> None:
    """Admission of `count` more jobs from `owner` at `address` (None: not known)."""
    queued = session.exec(
        select(func.count()).select_from(Job).where(Job.status == JobStatus.queued)
    ).one()
    if queued + count > settings.max_queued_jobs:
        raise SubmissionRefused(
            503,
            "queue_full",
            f"the grading queue is full ({queued} jobs waiting); try again later",
            retry_after=QUEUE_FULL_RETRY_S,
        )
    grader = owner.startswith("grader:")
    if queued and not grader:  # an empty queue has no wait to estimate (nor a query to pay)
        _check_queue_wait(session, settings, count)
    cap = settings.max_pending_per_grader if grader else settings.max_pending_per_learner
    mine = _waiting(session, Submission.owner == owner)
    if mine + count > cap:
        raise SubmissionRefused(
            429,
            "too_many_pending",
            f"{mine} of your submissions are waiting to be graded (at most {cap} at once); "
            "wait for their results",
            retry_after=PENDING_RETRY_S,
            count=mine,
            limit=cap,
        )
    budget = settings.worker_seconds_per_grader if grader else settings.worker_seconds_per_learner
    _check_worker_time(session, settings, budget, "your submissions", Submission.owner == owner)
    if grader or address is None:
        return
    # learners at one address together; grader tokens have their own caps above
    at_address = (Submission.client_address == address, col(Submission.owner).not_like("grader:%"))
    cap = settings.max_pending_per_address
    theirs = _waiting(session, *at_address)
    if theirs + count > cap:
        raise SubmissionRefused(
            429,
            "too_many_pending",
            f"{theirs} submissions from your address are waiting to be graded (at most {cap} at "
            "once); wait for their results",
            retry_after=PENDING_RETRY_S,
            count=theirs,
            limit=cap,
        )
    _check_worker_time(
        session,
        settings,
        settings.worker_seconds_per_address,
        "submissions from your address",
        *at_address,
    )


# Learners' queued jobs, the live workers (each grades one job at a time) and the mean lease
# time of the last jobs finished, in one round trip. The job's primary key orders jobs by age.
_LEARNER_QUEUE = text(
    """
    SELECT
        (SELECT COUNT(*) FROM job JOIN submission ON submission.id = job.submission_id
         WHERE job.status = 'queued' AND submission.owner NOT LIKE :graders),
        (SELECT COUNT(*) FROM worker_heartbeat
         WHERE last_seen >= :horizon AND stopped_at IS NULL),
        (SELECT AVG(finished_at - started_at) FROM (
            SELECT started_at, finished_at FROM job
            WHERE finished_at IS NOT NULL AND started_at IS NOT NULL
            ORDER BY id DESC LIMIT :recent
        ) AS recent)
    """
)
RECENT_JOBS = 50
UNKNOWN_JOB_S = 1.0  # no job finished yet: a warm grade takes well under this


def queue_wait_s(session: Session, settings: Settings, count: int = 1) -> float | None:
    """Seconds the last of `count` new learner jobs would wait for a worker, at the last jobs'
    mean lease time; None when no worker is alive (nothing to estimate from: /healthz says so).

    Grader tokens' jobs are left out: the claim is fair between senders (gradlab/queue.py), so a
    grader's backlog shares the workers with learners instead of standing in front of them."""
    horizon = time.time() - 3 * settings.heartbeat_s
    queued, workers, mean_s = session.execute(
        _LEARNER_QUEUE, {"horizon": horizon, "recent": RECENT_JOBS, "graders": "grader:%"}
    ).one()
    if not workers:
        return None
    return (queued + count) * (mean_s if mean_s is not None else UNKNOWN_JOB_S) / workers


def _check_queue_wait(session: Session, settings: Settings, count: int) -> None:
    wait_s = queue_wait_s(session, settings, count)
    if wait_s is None or wait_s <= settings.max_queue_wait_s:
        return
    # come back once the queue has drained to the limit, at that rate
    retry_s = min(max(math.ceil(wait_s - settings.max_queue_wait_s), 1), QUEUE_FULL_RETRY_S)
    raise SubmissionRefused(
        503,
        "queue_full",
        f"the graders are busy: a new submission would wait about {wait_s:.0f} s for a worker "
        f"(at most {settings.max_queue_wait_s:g} s); try again in {retry_s} s",
        retry_after=retry_s,
    )


def _waiting(session: Session, *where: Any) -> int:
    query = select(func.count()).select_from(Submission).where(col(Submission.status).in_(WAITING))
    return session.exec(query.where(*where)).one()


def _reached_a_worker(*where: Any, since: float) -> tuple[Any, ...]:
    """The filter of `_check_worker_time`: submissions since `since` matching `where` whose job
    has been leased (a queued job's started_at may be an earlier, lost lease's)."""
    return (
        col(Submission.created_at) > since,
        col(Job.status) != JobStatus.queued,
        col(Job.started_at).is_not(None),
        *where,
    )


def worker_time(
    session: Session, *where: Any, since: float, now: float
) -> list[tuple[float, float]]:
    """(submitted at, worker seconds) of the submissions since `since` that match `where` and
    reached a worker, oldest first; a job still running counts its seconds so far."""
    rows = session.exec(
        select(Submission.created_at, Job.started_at, Job.finished_at)
        .join(Job, col(Job.submission_id) == col(Submission.id))
        .where(*_reached_a_worker(*where, since=since))
        .order_by(col(Submission.created_at))
    ).all()
    return [(created, max((finished or now) - started, 0.0)) for created, started, finished in rows]


def _check_worker_time(
    session: Session, settings: Settings, budget: float, whose: str, *where: Any
) -> None:
    """429 once the matching submissions of the window have used `budget` worker seconds; the
    wait is until enough of the oldest of them leave the window."""
    window_s = settings.worker_time_window_s
    now = time.time()  # the workers' clock too: they stamp started_at and finished_at
    since = now - window_s
    # On every submission only the sum, in the database (a grader token may have thousands of
    # jobs in the window); the rows are read only to word a refusal and its Retry-After.
    total = session.exec(
        select(func.sum(func.coalesce(Job.finished_at, now) - col(Job.started_at)))
        .select_from(Submission)
        .join(Job, col(Job.submission_id) == col(Submission.id))
        .where(*_reached_a_worker(*where, since=since))
    ).one()
    if (total or 0.0) < budget:
        return
    spent = worker_time(session, *where, since=since, now=now)
    used = sum(seconds for _, seconds in spent)
    if used < budget:
        return
    over, retry_s = used - budget, window_s
    for submitted_at, seconds in spent:
        over -= seconds
        if over < 0:
            retry_s = submitted_at + window_s - now
            break
    minutes = math.ceil(window_s / 60)
    raise SubmissionRefused(
        429,
        "worker_time",
        f"{whose} used {used:.0f} s of grading time in the last {minutes} min (at most "
        f"{budget:.0f} s); try again in {math.ceil(retry_s)} s",
        retry_after=max(math.ceil(retry_s), 1),
        used=math.ceil(used),
        limit=round(budget),
        minutes=minutes,
    )
