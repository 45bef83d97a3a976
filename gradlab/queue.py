"""The grading queue: enqueue a submission, lease its job to one worker, finish it once.

A worker claims a job with one atomic UPDATE ... RETURNING (on PostgreSQL the candidate row is
picked FOR UPDATE SKIP LOCKED, so concurrent workers never wait on each other), renews its lease
while grading, and writes the result only if it still holds the lease. A job whose worker died is
leased again once its lease expires; after `max_attempts` leases it goes `dead` with the reason.
"""

import logging
import time
from dataclasses import dataclass

from sqlalchemy import text
from sqlmodel import Session

from gradlab import insight_counts, webhooks
from gradlab.logs import fields
from gradlab.models import Job, Submission, SubmissionStatus
from gradlab.results import GradeResult, ResultError

log = logging.getLogger("gradlab.queue")
MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class ClaimedJob:
    job_id: int
    submission_id: str
    attempts: int
    exercise: str
    code: str
    locale: str
    created_at: float


def enqueue(*, session: Session, exercise: str, code: str, locale: str, owner: str) -> Submission:
    """Store a submission and its job in one transaction."""
    submission = stage(session=session, exercise=exercise, code=code, locale=locale, owner=owner)
    session.commit()
    session.refresh(submission)
    return submission


def stage(
    *,
    session: Session,
    exercise: str,
    code: str,
    locale: str,
    owner: str,
    callback_url: str | None = None,
    client_address: str | None = None,
) -> Submission:
    """Add a submission and its job to the session's transaction, without committing: the
    caller commits them together with what belongs to them (an idempotency key, a batch)."""
    submission = Submission(
        exercise=exercise,
        code=code,
        locale=locale,
        owner=owner,
        callback_url=callback_url,
        client_address=client_address,
    )
    session.add(submission)
    session.flush()
    insight_counts.submitted(session, submission)  # class insight's counters, same transaction
    job = Job(submission_id=submission.id)
    session.add(job)
    session.flush()
    log.info(
        "submitted",
        extra=fields(event="submit", submission_id=submission.id, job_id=job.id, exercise=exercise),
    )
    return submission


# The next job: the oldest of those whose sender (client address) has the fewest jobs being
# graded right now. One address that queues many slow jobs (endless loops run to the wall
# clock) then takes one worker after another only while nobody else is waiting; anybody else's
# job goes first as soon as a worker is free. A job without an address (the CLI, rows from
# before addresses were kept) is its own sender.
_CANDIDATE = """
    SELECT job.id FROM job JOIN submission ON submission.id = job.submission_id
    WHERE job.status = 'queued' OR (job.status = 'leased' AND job.lease_expires_at < :now)
    ORDER BY (
        SELECT COUNT(*) FROM job AS busy JOIN submission AS sender
            ON sender.id = busy.submission_id
        WHERE busy.status = 'leased' AND busy.lease_expires_at >= :now
          AND COALESCE(sender.client_address, '') = COALESCE(submission.client_address, '')
    ), job.id
    LIMIT 1
"""


_ANY_CLAIMABLE = text(
    "SELECT 1 FROM job WHERE status = 'queued' "
    "OR (status = 'leased' AND lease_expires_at < :now) LIMIT 1"
)


def claim(
    *, session: Session, worker_id: str, lease_s: float, max_attempts: int
) -> ClaimedJob | None:
    """Lease the next available job (_CANDIDATE: fair between senders, oldest first) to
    `worker_id`, or return None when there is none."""
    now = time.time()
    # Idle workers ask often (`poll_interval_s`): a read first, so that asking an empty queue
    # never takes SQLite's write lock (an UPDATE takes it even when it matches nothing).
    if session.execute(_ANY_CLAIMABLE, {"now": now}).first() is None:
        session.commit()
        return None
    _bury_exhausted(session=session, now=now, max_attempts=max_attempts)
    postgresql = session.bind.dialect.name == "postgresql"
    skip_locked = " FOR UPDATE OF job SKIP LOCKED" if postgresql else ""
    row = session.execute(
        text(
            f"""
            UPDATE job SET status = 'leased', lease_owner = :worker, lease_expires_at = :expires,
                attempts = attempts + 1, started_at = :now
            WHERE id = ({_CANDIDATE}{skip_locked})
              AND (status = 'queued' OR (status = 'leased' AND lease_expires_at < :now))
            RETURNING id, submission_id, attempts
            """
        ),
        {"worker": worker_id, "expires": now + lease_s, "now": now},
    ).first()
    if row is None:
        session.commit()
        return None
    submission = session.get(Submission, row.submission_id)
    assert submission is not None  # foreign key
    submission.status = SubmissionStatus.running
    session.add(submission)
    session.commit()
    return ClaimedJob(
        job_id=row.id,
        submission_id=row.submission_id,
        attempts=row.attempts,
        exercise=submission.exercise,
        code=submission.code,
        locale=submission.locale,
        created_at=submission.created_at,
    )


def renew(*, session: Session, job_id: int, worker_id: str, lease_s: float) -> bool:
    """Extend the lease; False when this worker no longer holds it."""
    updated = session.execute(
        text(
            "UPDATE job SET lease_expires_at = :expires "
            "WHERE id = :id AND lease_owner = :worker AND status = 'leased'"
        ),
        {"expires": time.time() + lease_s, "id": job_id, "worker": worker_id},
    ).rowcount
    session.commit()
    return updated == 1


def finish(*, session: Session, job_id: int, worker_id: str, result: GradeResult) -> bool:
    """Write the result once, only while holding the lease; False if the lease was lost."""
    now = time.time()
    updated = session.execute(
        text(
            "UPDATE job SET status = 'done', finished_at = :now, lease_expires_at = NULL "
            "WHERE id = :id AND lease_owner = :worker AND status = 'leased'"
        ),
        {"now": now, "id": job_id, "worker": worker_id},
    ).rowcount
    if updated != 1:
        session.rollback()
        return False
    job = session.get(Job, job_id)
    assert job is not None
    _store_result(session=session, submission_id=job.submission_id, result=result, now=now)
    session.commit()
    return True


def fail(*, session: Session, job_id: int, worker_id: str, error: str, max_attempts: int) -> bool:
    """The worker could not grade (an exception on our side, not the learner's code): give the
    job back for another attempt, or bury it with `error` as the reason once it has had
    `max_attempts`. False if this worker no longer held the lease."""
    now = time.time()
    error = error[:MAX_REASON_CHARS]
    held = "WHERE id = :id AND lease_owner = :worker AND status = 'leased'"
    params = {"id": job_id, "worker": worker_id}
    row = session.execute(text(f"SELECT submission_id, attempts FROM job {held}"), params).first()
    if row is None:
        session.rollback()
        return False
    dead = row.attempts >= max_attempts
    reason = f"failed {row.attempts} times; last error: {error}" if dead else error
    # literal statuses: on PostgreSQL the column is an enum type, which a CASE would not be
    status = "'dead', finished_at = :now" if dead else "'queued'"
    updated = session.execute(
        text(
            f"UPDATE job SET status = {status}, last_error = :error, lease_owner = NULL, "
            f"lease_expires_at = NULL {held}"
        ),
        {**params, "error": reason, "now": now},
    ).rowcount
    if updated != 1:  # the lease expired and was taken between the two statements
        session.rollback()
        return False
    if dead:
        _store_dead(
            session=session, job_id=job_id, submission_id=row.submission_id, reason=reason, now=now
        )
    else:
        submission = session.get(Submission, row.submission_id)
        assert submission is not None
        submission.status = SubmissionStatus.queued
        session.add(submission)
    session.commit()
    return True


def _bury_exhausted(*, session: Session, now: float, max_attempts: int) -> None:
    """Jobs whose last allowed lease expired go `dead`, with an internal_error result."""
    rows = session.execute(
        text(
            "UPDATE job SET status = 'dead', finished_at = :now, last_error = :reason "
            "  || CASE WHEN last_error IS NULL THEN '' ELSE '; last error: ' || last_error END "
            "WHERE status = 'leased' AND lease_expires_at < :now AND attempts >= :max "
            "RETURNING id, submission_id, last_error"
        ),
        {"now": now, "max": max_attempts, "reason": f"worker lost the job {max_attempts} times"},
    ).all()
    for row in rows:
        _store_dead(
            session=session,
            job_id=row.id,
            submission_id=row.submission_id,
            reason=row.last_error,
            now=now,
        )


def _store_dead(
    *, session: Session, job_id: int, submission_id: str, reason: str, now: float
) -> None:
    """The submission of a dead job gets an internal_error result that names the reason."""
    submission = session.get(Submission, submission_id)
    assert submission is not None
    error = ResultError(
        kind="internal_error",
        message=f"Grading failed on our side ({reason}). Please submit again later.",
    )
    result = GradeResult.failure(error, locale=submission.locale)
    _store_result(session=session, submission_id=submission_id, result=result, now=now)
    log.warning(
        "job dead",
        extra=fields(event="dead", submission_id=submission_id, job_id=job_id, reason=reason),
    )


def _store_result(*, session: Session, submission_id: str, result: GradeResult, now: float) -> None:
    submission = session.get(Submission, submission_id)
    assert submission is not None
    counted_before = insight_counts.result_keys(submission)
    submission.status = SubmissionStatus(result.status)
    submission.result_json = result.model_dump_json()
    # what class insight counts (app/insights), as columns it can index
    submission.diagnosis_code = result.diagnosis.code if result.diagnosis else None
    submission.error_kind = result.error.kind if result.error else None
    submission.finished_at = now
    session.add(submission)
    insight_counts.graded(session, submission, counted_before)  # the same transaction
    if submission.callback_url:  # the outbox row commits with the result (gradlab/webhooks.py)
        webhooks.stage_delivery(session=session, submission=submission, now=now)
