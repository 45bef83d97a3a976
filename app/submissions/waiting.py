"""Holding an answer until a submission's result exists (the API's `?wait`, the lesson page's
result fragment), without holding a database slot or connection meanwhile (app/admission.py):
each look is a short session of its own, every `poll_interval_s` or when a worker rings."""

import time
from collections.abc import Callable

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Engine
from sqlmodel import Session

from app.admission import Counter
from app.doorbell import web_doorbell
from gradlab.config import Settings
from gradlab.models import Submission, SubmissionStatus

DONE = {SubmissionStatus.passed, SubmissionStatus.failed, SubmissionStatus.error}


def graded(submission: Submission) -> bool:
    return submission.status in DONE


def _reload(engine: Engine, submission_id: str) -> Submission | None:
    """The submission as stored now, read in a short session of its own (detached)."""
    with Session(engine) as session:
        submission = session.get(Submission, submission_id)
        if submission is not None:
            session.expunge(submission)
        return submission


async def wait_for(
    request: Request,
    session: Session,
    submission: Submission,
    wait_s: float,
    *,
    until: Callable[[Submission], bool] = graded,
) -> Submission:
    """The submission once `until` holds for it (graded, by default) or `wait_s` passed. The
    request's session is closed and its slot given back first. Past `max_waiting_requests`
    waiting at once, the submission is returned as it is (the caller answers at once)."""
    waiting: Counter = request.app.state.waiting
    if until(submission) or not waiting.enter():
        return submission
    try:
        await run_in_threadpool(session.close)  # its objects keep their loaded values
        request.state.db_slot.release()
        settings: Settings = request.app.state.settings
        deadline = time.monotonic() + wait_s
        while not until(submission) and time.monotonic() < deadline:
            # a worker that stores the result rings at once (app/doorbell.py)
            pause = min(settings.poll_interval_s, max(deadline - time.monotonic(), 0))
            await web_doorbell(request.app).wait(submission.id, pause)
            found = await run_in_threadpool(_reload, request.app.state.engine, submission.id)
            submission = found or submission
    finally:
        waiting.leave()
    return submission
