"""Tables: a learner's or grader's submission, and the grading job that carries its lease;
accounts, their login tokens, a learner's lesson progress and exercise drafts.

Everything a learner makes is keyed by an *owner* string: `learner:<id>` (the anonymous signed
cookie), `user:<id>` (an account) or `grader:<id>` (a grader token, `gradlab token create`).
Logging in re-owns the anonymous rows to the account.
"""

import time
import uuid
from enum import StrEnum

from sqlalchemy import Index, UniqueConstraint, false, text
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
    __table_args__ = (
        # newest-first listing per owner (keyset pagination: created_at, id); an owner's
        # worker time of recent submissions (app/submissions/service.py)
        Index("ix_submission_owner_created", "owner", "created_at", "id"),
        # the caps per client address: waiting submissions, recent worker time
        Index("ix_submission_address_created", "client_address", "created_at"),
        # class insight's summaries (gradlab/insight_counts.py): one learner's submissions of an
        # exercise in time order, with what their summary row reads, never the rows with the code
        Index("ix_submission_insights", "exercise", "owner", "created_at", "status", "locale"),
    )

    id: str = Field(default_factory=lambda: uuid.uuid4().hex, primary_key=True, max_length=32)
    owner: str = Field(index=True, max_length=200)
    status: SubmissionStatus = Field(default=SubmissionStatus.queued, max_length=16)
    result_json: str | None = None
    created_at: float = Field(default_factory=time.time)
    finished_at: float | None = None
    # graders only: POSTed the result when it is stored (gradlab/webhooks.py, an outbox row)
    callback_url: str | None = Field(default=None, max_length=2048)
    # who sent it (app/client.py): the caps on submissions waiting per address count it
    client_address: str | None = Field(default=None, max_length=64)
    # copied from result_json when the result is stored (gradlab/queue.py), for class insight
    diagnosis_code: str | None = Field(default=None, max_length=100)
    error_kind: str | None = Field(default=None, max_length=32)


class HealthProbe(SQLModel, table=True):
    """One row per web process, rewritten by each /healthz: proof that the database takes a
    write (app/health.py)."""

    __tablename__ = "health_probe"

    id: str = Field(primary_key=True, max_length=200)  # host:pid
    written_at: float


class RateLimit(SQLModel, table=True):
    """One rate-limited key's recent hits (app/security/ratelimit.py), shared by every web
    process: `hits` is a JSON list of `[time, count]`, oldest first."""

    __tablename__ = "rate_limit"

    key: str = Field(primary_key=True, max_length=64)  # SHA-256 of the key, hex
    hits: str
    expires_at: float = Field(index=True)  # the last hit's time + its window
    version: int  # +1 on every write: a hit writes only over the version it read


class WorkerHeartbeat(SQLModel, table=True):
    """One row per worker process, rewritten every `heartbeat_s` (gradlab/heartbeat.py): who is
    alive, on which host, what it did last, and its own latency histograms (JSON), which the web
    process exposes on /metrics with a `worker` label."""

    __tablename__ = "worker_heartbeat"

    worker_id: str = Field(primary_key=True, max_length=200)
    host: str = Field(max_length=200)
    pid: int
    slots: int
    device: str = Field(max_length=16)
    started_at: float
    last_seen: float = Field(index=True)
    stopped_at: float | None = None
    last_job_id: int | None = None
    last_submission_id: str | None = Field(default=None, max_length=32)
    jobs_done: int = 0
    stats_json: str | None = None


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


class UserBase(SQLModel):
    email: str = Field(unique=True, index=True, max_length=320)  # normalized: app/accounts


class User(UserBase, table=True):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex, primary_key=True, max_length=32)
    password_hash: str = Field(max_length=200)
    created_at: float = Field(default_factory=time.time)
    # may read class insight (app/insights): `gradlab user instructor EMAIL`
    instructor: bool = Field(default=False, sa_column_kwargs={"server_default": false()})


class AuthToken(SQLModel, table=True):
    """A login: the bearer token of an app, or the browser session cookie's token. Only the
    SHA-256 of the token is stored; logging out deletes the row (revocation)."""

    id: int | None = Field(default=None, primary_key=True)
    token_hash: str = Field(unique=True, index=True, max_length=64)
    user_id: str = Field(foreign_key="user.id", index=True, max_length=32)
    created_at: float = Field(default_factory=time.time)
    last_used_at: float = Field(default_factory=time.time)
    expires_at: float


class LessonProgress(SQLModel, table=True):
    """What the server cannot derive from submissions: reading position, read, quick check.
    Exercise states are derived from the submission table on read (see app/progress)."""

    __table_args__ = (UniqueConstraint("owner", "lesson"),)

    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(index=True, max_length=200)
    lesson: str = Field(max_length=100)
    read: bool = False
    quiz_passed: bool = False
    last_section: str | None = Field(default=None, max_length=200)
    section_at: float | None = None  # when last_section was reported
    updated_at: float = Field(default_factory=time.time)


class Draft(SQLModel, table=True):
    """The editor's autosaved code of one exercise, per owner."""

    __table_args__ = (UniqueConstraint("owner", "exercise"),)

    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(index=True, max_length=200)
    exercise: str = Field(max_length=200)
    code: str
    updated_at: float = Field(default_factory=time.time)


class HintOpen(SQLModel, table=True):
    """A learner opened hint `hint` (1-based) of an exercise, first at `opened_at`: one row per
    hint, so that class insight can count the hints opened before the first pass."""

    __tablename__ = "hint_open"
    __table_args__ = (
        UniqueConstraint("owner", "exercise", "hint"),
        Index("ix_hint_open_exercise_owner", "exercise", "owner", "opened_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(max_length=200)
    exercise: str = Field(max_length=200)
    hint: int
    opened_at: float = Field(default_factory=time.time)


class InsightCount(SQLModel, table=True):
    """Class insight's counters (gradlab/insight_counts.py), kept in the transaction that writes
    what they count: per exercise, UTC day (days since 1970-01-01), language and `metric`, with
    `key` a diagnosis code, an error kind or a histogram's value ('' otherwise). Per-submission
    metrics count on the submission's day and language; per-learner ones on those of the
    learner's first submission of the exercise; `hinted` on the day of hint 1 (language ''); lesson
    progress (`lesson_*`, `exercise` holding the lesson) on the day of its last update."""

    __tablename__ = "insight_count"

    metric: str = Field(primary_key=True, max_length=32)  # first: each query reads some metrics
    exercise: str = Field(primary_key=True, max_length=200)
    day: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    locale: str = Field(primary_key=True, max_length=8)
    key: str = Field(default="", primary_key=True, max_length=200)
    n: int = 0


class InsightLearner(SQLModel, table=True):
    """One learner's summary of one exercise (grader tokens have none): their first submission
    (time, language) and, once they passed, their first pass (the passing submission's time),
    the submissions up to it, the hints opened before it (gradlab/insight_counts.py)."""

    __tablename__ = "insight_learner"
    __table_args__ = (
        # seconds to the first pass in order per exercise, with what filters them: the
        # percentiles read this index alone
        Index("ix_insight_learner_seconds", "exercise", "seconds_to_pass", "first_at", "locale"),
    )

    exercise: str = Field(primary_key=True, max_length=200)
    owner: str = Field(primary_key=True, index=True, max_length=200)  # index: re-owning
    first_at: float
    locale: str = Field(max_length=8)
    passed_at: float | None = None
    attempts_to_pass: int | None = None
    hints_before_pass: int | None = None
    seconds_to_pass: float | None = None


class GraderToken(SQLModel, table=True):
    """A grader's API token (`gradlab token create NAME`): owner `grader:<id>`. Only the SHA-256
    of the token is stored; the webhook signing secret is stored as is (the dispatcher signs
    with it). Revoking sets `revoked_at`; the row stays (submissions keep a meaningful owner),
    and the name can be given to a new token."""

    __tablename__ = "grader_token"
    __table_args__ = (
        Index(
            "ux_grader_token_active_name",
            "name",
            unique=True,
            sqlite_where=text("revoked_at IS NULL"),
            postgresql_where=text("revoked_at IS NULL"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=100)
    token_hash: str = Field(unique=True, index=True, max_length=64)
    prefix: str = Field(max_length=16)  # the token's first characters, to recognize it in lists
    webhook_secret: str = Field(max_length=100)
    created_at: float = Field(default_factory=time.time)
    last_used_at: float | None = None
    revoked_at: float | None = None


class IdempotencyKey(SQLModel, table=True):
    """A POST's `Idempotency-Key` per owner: the request's hash and the submissions it made,
    so a retry returns them instead of enqueuing again (until `expires_at`)."""

    __tablename__ = "idempotency_key"
    __table_args__ = (UniqueConstraint("owner", "key"),)

    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(max_length=200)
    key: str = Field(max_length=255)
    request_hash: str = Field(max_length=64)
    submission_ids: str  # JSON list, in request order
    created_at: float = Field(default_factory=time.time)
    expires_at: float = Field(index=True)


class WebhookDeliveryStatus(StrEnum):
    pending = "pending"  # waiting for its next attempt (next_attempt_at)
    delivering = "delivering"  # leased to a dispatcher
    delivered = "delivered"
    failed = "failed"  # gave up: attempts exhausted, or refused (address, revoked token)


class WebhookDelivery(SQLModel, table=True):
    """Outbox row: one finished submission's result to POST to its `callback_url`. Written in
    the transaction that stores the result; dispatchers lease rows like jobs (gradlab/webhooks)."""

    __tablename__ = "webhook_delivery"

    id: str = Field(default_factory=lambda: uuid.uuid4().hex, primary_key=True, max_length=32)
    submission_id: str = Field(foreign_key="submission.id", index=True, max_length=32)
    grader_token_id: int = Field(foreign_key="grader_token.id", index=True)
    url: str = Field(max_length=2048)
    payload: str  # the exact JSON body, the same bytes on every attempt
    status: WebhookDeliveryStatus = Field(
        default=WebhookDeliveryStatus.pending, index=True, max_length=16
    )
    attempts: int = 0
    next_attempt_at: float = Field(default_factory=time.time, index=True)
    lease_owner: str | None = Field(default=None, max_length=200)
    lease_expires_at: float | None = None
    last_error: str | None = None
    created_at: float = Field(default_factory=time.time)
    delivered_at: float | None = None


class WebhookAttempt(SQLModel, table=True):
    """The delivery log: one row per attempt of a webhook delivery."""

    __tablename__ = "webhook_attempt"
    __table_args__ = (UniqueConstraint("delivery_id", "attempt"),)

    id: int | None = Field(default=None, primary_key=True)
    delivery_id: str = Field(foreign_key="webhook_delivery.id", index=True, max_length=32)
    attempt: int
    started_at: float
    duration_s: float
    status_code: int | None = None
    error: str | None = None
