"""Tables: a learner's or grader's submission, and the grading job that carries its lease."""

import time
import uuid
from enum import StrEnum

from sqlmodel import Field, SQLModel


class SubmissionStatus(StrEnum):
    queued = "queued"
    running = "running"
    passed = "passed"
    failed = "failed"
    error = "error"


class JobStatus(StrEnum):
    queued = "queued"
    leased = "leased"
    done = "done"
    dead = "dead"


class SubmissionBase(SQLModel):
    exercise: str = Field(max_length=200)
    code: str
    locale: str = Field(default="en", max_length=8)


class Submission(SubmissionBase, table=True):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex, primary_key=True, max_length=32)
    owner: str = Field(index=True, max_length=200)
    status: SubmissionStatus = Field(default=SubmissionStatus.queued, max_length=16)
    result_json: str | None = None
    created_at: float = Field(default_factory=time.time)
    finished_at: float | None = None


class Job(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    submission_id: str = Field(foreign_key="submission.id", unique=True, max_length=32)
    status: JobStatus = Field(default=JobStatus.queued, index=True, max_length=16)
    attempts: int = 0
    lease_owner: str | None = Field(default=None, max_length=200)
    lease_expires_at: float | None = None
    last_error: str | None = None
    created_at: float = Field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
