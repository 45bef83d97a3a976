"""Submission service for the web: validate, enqueue, read back (owner only)."""

import json
from typing import Any

from fastapi import HTTPException
from pydantic import BaseModel
from sqlmodel import Session

from gradlab import queue
from gradlab.config import LOCALES, Settings
from gradlab.content.loader import Content
from gradlab.models import Submission


class SubmissionCreate(BaseModel):
    exercise: str
    code: str
    locale: str = "en"


class SubmissionPublic(BaseModel):
    id: str
    exercise: str
    locale: str
    status: str
    url: str
    created_at: float
    finished_at: float | None
    result: dict[str, Any] | None


def create(
    *, session: Session, content: Content, settings: Settings, data: SubmissionCreate, owner: str
) -> Submission:
    if data.exercise not in content.exercises:
        raise HTTPException(status_code=404, detail=f"unknown exercise {data.exercise!r}")
    if data.locale not in LOCALES:
        raise HTTPException(status_code=422, detail=f"locale must be one of {list(LOCALES)}")
    size = len(data.code.encode("utf-8"))
    if size > settings.max_code_bytes:
        raise HTTPException(
            status_code=413,
            detail=f"code is {size} bytes; the limit is {settings.max_code_bytes}",
        )
    return queue.enqueue(
        session=session, exercise=data.exercise, code=data.code, locale=data.locale, owner=owner
    )


def get_owned(*, session: Session, submission_id: str, owner: str) -> Submission:
    """The submission if `owner` owns it; 404 otherwise (existence is not revealed)."""
    submission = session.get(Submission, submission_id)
    if submission is None or submission.owner != owner:
        raise HTTPException(status_code=404, detail="submission not found")
    return submission


def to_public(submission: Submission) -> SubmissionPublic:
    return SubmissionPublic(
        id=submission.id,
        exercise=submission.exercise,
        locale=submission.locale,
        status=submission.status,
        url=f"/api/v1/submissions/{submission.id}",
        created_at=submission.created_at,
        finished_at=submission.finished_at,
        result=json.loads(submission.result_json) if submission.result_json else None,
    )
