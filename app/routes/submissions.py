"""REST API v1, submissions: create (one or a batch, idempotent), read, list, webhook log.

Who may do what (docs/api.md):
- everyone with an owner (a grader token `grader:<id>`, an account `user:<id>`, the anonymous
  cookie `learner:<id>`): create, read and list their own submissions; others' are 404;
- grader tokens only: `callback_url` (signed with the token's webhook secret) and the batch
  endpoint (401 without a bearer token, 403 with an account's).
"""

import base64
import binascii
import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import and_, or_
from sqlmodel import col, select

from app import idempotency
from app.client import client_address
from app.deps import (
    ContentDep,
    GraderDep,
    OwnerDep,
    SessionDep,
    SettingsDep,
    enforce_limit,
    limit_submissions,
    submission_limit,
)
from app.submissions import service as submissions
from app.submissions.schemas import Locale, SubmissionCreate, SubmissionPublic
from app.submissions.waiting import graded, wait_for
from gradlab.models import Submission, SubmissionStatus, WebhookAttempt, WebhookDelivery

MAX_WAIT_S = 60
BATCH_PATH = "/api/v1/submissions/batch"  # its body may be larger (app/security/body_limit.py)
MAX_BATCH = 100
MAX_PAGE = 100

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="a grader token (`gradlab token create NAME`, `glg_...`) or an account's "
    "access token (`POST /api/v1/auth/login`); browsers use the session cookie instead",
)
router = APIRouter(prefix="/api/v1", tags=["submissions"], dependencies=[Depends(bearer)])


class ErrorBody(BaseModel):
    detail: str


class ValidationErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    detail: list[ValidationErrorItem] | str


def _error(description: str, example: str) -> dict[str, Any]:
    return {
        "model": ErrorBody,
        "description": description,
        "content": {"application/json": {"example": {"detail": example}}},
    }


E401 = {401: _error("no or invalid bearer token", "invalid or revoked grader token")}
E403 = {403: _error("authenticated but not allowed", "callback_url needs a grader token")}
E404 = {404: _error("unknown exercise, or not your submission", "submission not found")}
E409 = {
    409: _error(
        "Idempotency-Key reused with a different request",
        "this Idempotency-Key was already used with a different request",
    )
}
E413 = {413: _error("code over the size limit", "code is 70000 bytes; the limit is 65536")}
E422 = {422: {"model": ValidationErrorBody, "description": "malformed request"}}
E429 = {
    429: {
        **_error(
            "too many submissions in the window, or waiting to be graded at once",
            "too many requests; try again in 12 s",
        ),
        "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}},
    }
}
E503 = {
    503: {
        **_error(
            "the grading queue is full, or the server is busy",
            "the grading queue is full (2000 jobs waiting); try again later",
        ),
        "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}},
    }
}

LocaleQuery = Annotated[
    Locale | None,
    Query(
        description="write the result's messages in this language (default: the submission's "
        "own); a message stored without its source keeps its stored text"
    ),
]

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=idempotency.MAX_KEY,
        description="any unique string (a UUID): a retry with the same key returns the same "
        "submission(s) instead of grading again; remembered for 24 h per token",
    ),
]


# --- creating -----------------------------------------------------------------------------


def _create(**arguments: Any) -> tuple[list[Submission], bool]:
    """The service's `create`, its refusal answered as JSON."""
    try:
        return submissions.create(**arguments)
    except submissions.SubmissionRefused as refused:
        headers = None if refused.retry_after is None else {"Retry-After": str(refused.retry_after)}
        raise HTTPException(refused.status, detail=refused.detail, headers=headers) from None


@router.post(
    "/submissions",
    status_code=202,
    response_model=SubmissionPublic,
    dependencies=[Depends(limit_submissions)],
    summary="Submit code for grading",
    responses={
        200: {"model": SubmissionPublic, "description": "graded within `wait` seconds"},
        **E401,
        **E403,
        **E404,
        **E409,
        **E413,
        **E422,
        **E429,
        **E503,
    },
)
async def create_submission(
    request: Request,
    data: SubmissionCreate,
    session: SessionDep,
    content: ContentDep,
    settings: SettingsDep,
    owner: OwnerDep,
    response: Response,
    wait: Annotated[
        float, Query(ge=0, le=MAX_WAIT_S, description="hold up to this many seconds")
    ] = 0,
    idempotency_key: IdempotencyKeyHeader = None,
) -> SubmissionPublic:
    """Queue code for grading: 202 with `{id, status, url}`. With `?wait=N`, hold up to N s and
    answer 200 with the result once graded. With `Idempotency-Key`, a retry answers with the
    same submission (header `Idempotent-Replayed: true`) and never grades twice."""
    # Database calls run in the thread pool: the event loop never waits on SQLite or a lock.
    made, replayed = await run_in_threadpool(
        _create,
        session=session,
        content=content,
        settings=settings,
        owner=owner,
        address=client_address(request),
        items=[data],
        key=idempotency_key,
        digest=idempotency.request_hash("submission", data),
        batch=False,
    )
    if not made:  # the remembered submission is gone (never deleted today)
        raise HTTPException(status_code=404, detail="submission not found")
    submission = made[0]
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    if wait > 0:
        submission = await wait_for(request, session, submission, wait)
    if graded(submission):
        response.status_code = 200
    return submissions.to_public(submission)


class BatchCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {"exercise": "gradient-accumulation/accumulate", "code": "..."},
                        {
                            "exercise": "gradient-accumulation/last-partial-cycle",
                            "code": "...",
                            "locale": "de",
                            "callback_url": "https://ci.example.org/gradlab",
                        },
                    ]
                }
            ]
        },
    )

    items: list[SubmissionCreate] = Field(min_length=1, max_length=MAX_BATCH)


class SubmissionList(BaseModel):
    items: list[SubmissionPublic]


@router.post(
    "/submissions/batch",
    status_code=202,
    response_model=SubmissionList,
    summary="Submit up to 100 submissions at once (grader tokens)",
    responses={**E401, **E403, **E404, **E409, **E413, **E422, **E429, **E503},
)
async def create_batch(
    batch: BatchCreate,
    request: Request,
    session: SessionDep,
    content: ContentDep,
    settings: SettingsDep,
    grader: GraderDep,
    owner: OwnerDep,
    response: Response,
    idempotency_key: IdempotencyKeyHeader = None,
) -> SubmissionList:
    """All or nothing: if any item is refused, none is stored, and the answer names every
    refused item (`items[3]: unknown exercise ...`) with the first one's status. The answer
    lists the submissions in the order of the request. Each item counts against the rate
    limit."""
    await run_in_threadpool(  # a database transaction (app/security/ratelimit.py)
        enforce_limit,
        request,
        f"submit:{owner}",
        limit=submission_limit(owner, settings),
        window_s=settings.rate_window_s,
        cost=len(batch.items),
    )
    made, replayed = await run_in_threadpool(
        _create,
        session=session,
        content=content,
        settings=settings,
        owner=owner,
        address=client_address(request),
        items=batch.items,
        key=idempotency_key,
        digest=idempotency.request_hash("batch", batch),
        batch=True,
    )
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return SubmissionList(items=[submissions.to_public(s) for s in made])


# --- reading ------------------------------------------------------------------------------


class SubmissionPage(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [], "next_cursor": "WzE3NjcyMjU2MDAuMCwi..."}]}
    )

    items: list[SubmissionPublic]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null: last")


def _encode_cursor(submission: Submission) -> str:
    raw = json.dumps([submission.created_at, submission.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, submission_id = json.loads(raw)
        if isinstance(created_at, bool) or not isinstance(created_at, int | float):
            raise ValueError
        if not isinstance(submission_id, str):
            raise ValueError
        return float(created_at), submission_id
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise HTTPException(status_code=422, detail="invalid cursor") from None


@router.get(
    "/submissions",
    response_model=SubmissionPage,
    summary="List your submissions, newest first",
    responses={**E401, **E422},
)
def list_submissions(
    session: SessionDep,
    owner: OwnerDep,
    content: ContentDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    cursor: Annotated[
        str | None, Query(max_length=200, description="`next_cursor` of the previous page")
    ] = None,
    exercise: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[SubmissionStatus | None, Query()] = None,
    locale: LocaleQuery = None,
) -> SubmissionPage:
    """Keyset pagination (created_at, id): stable while new submissions arrive; filters by
    exercise and status."""
    query = select(Submission).where(Submission.owner == owner)
    if exercise is not None:
        query = query.where(Submission.exercise == exercise)
    if status is not None:
        query = query.where(Submission.status == status)
    if cursor is not None:
        created_at, submission_id = _decode_cursor(cursor)
        query = query.where(
            or_(
                col(Submission.created_at) < created_at,
                and_(col(Submission.created_at) == created_at, col(Submission.id) < submission_id),
            )
        )
    query = query.order_by(col(Submission.created_at).desc(), col(Submission.id).desc())
    rows = list(session.exec(query.limit(limit + 1)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    return SubmissionPage(
        items=[submissions.to_public(s, content=content, locale=locale) for s in rows],
        next_cursor=_encode_cursor(rows[-1]) if more and rows else None,
    )


@router.get(
    "/submissions/{submission_id}",
    response_model=SubmissionPublic,
    summary="Read a submission and its result",
    responses={**E401, **E404, **E422},
)
def read_submission(
    submission_id: str,
    session: SessionDep,
    owner: OwnerDep,
    content: ContentDep,
    locale: LocaleQuery = None,
) -> SubmissionPublic:
    """With `?locale=`, the result's messages are written in that language."""
    submission = submissions.get_owned(session=session, submission_id=submission_id, owner=owner)
    return submissions.to_public(submission, content=content, locale=locale)


class AttemptPublic(BaseModel):
    attempt: int
    started_at: float
    duration_s: float
    status_code: int | None
    error: str | None


class DeliveryPublic(BaseModel):
    id: str = Field(description="also sent as X-Gradlab-Delivery, the same on every attempt")
    url: str
    status: str = Field(description="pending, delivering, delivered or failed")
    attempts: int
    next_attempt_at: float | None = Field(description="when pending: the next attempt")
    delivered_at: float | None
    last_error: str | None
    created_at: float
    log: list[AttemptPublic]


class DeliveryList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {
                            "id": "9b1c...",
                            "url": "https://lms.example.edu/hooks/gradlab",
                            "status": "delivered",
                            "attempts": 2,
                            "next_attempt_at": None,
                            "delivered_at": 1767225612.3,
                            "last_error": None,
                            "created_at": 1767225601.0,
                            "log": [
                                {
                                    "attempt": 1,
                                    "started_at": 1767225601.0,
                                    "duration_s": 10.0,
                                    "status_code": None,
                                    "error": "timed out after 10 s",
                                },
                                {
                                    "attempt": 2,
                                    "started_at": 1767225612.2,
                                    "duration_s": 0.1,
                                    "status_code": 200,
                                    "error": None,
                                },
                            ],
                        }
                    ]
                }
            ]
        }
    )

    items: list[DeliveryPublic]


@router.get(
    "/submissions/{submission_id}/deliveries",
    response_model=DeliveryList,
    summary="The webhook deliveries of a submission, with every attempt",
    responses={**E401, **E404},
)
def read_deliveries(submission_id: str, session: SessionDep, owner: OwnerDep) -> DeliveryList:
    submissions.get_owned(session=session, submission_id=submission_id, owner=owner)
    deliveries = session.exec(
        select(WebhookDelivery)
        .where(WebhookDelivery.submission_id == submission_id)
        .order_by(col(WebhookDelivery.created_at))
    ).all()
    items = []
    for delivery in deliveries:
        attempts = session.exec(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id == delivery.id)
            .order_by(col(WebhookAttempt.attempt))
        ).all()
        items.append(
            DeliveryPublic(
                id=delivery.id,
                url=delivery.url,
                status=str(delivery.status),
                attempts=delivery.attempts,
                next_attempt_at=delivery.next_attempt_at if delivery.status == "pending" else None,
                delivered_at=delivery.delivered_at,
                last_error=delivery.last_error,
                created_at=delivery.created_at,
                log=[
                    AttemptPublic(
                        attempt=a.attempt,
                        started_at=a.started_at,
                        duration_s=a.duration_s,
                        status_code=a.status_code,
                        error=a.error,
                    )
                    for a in attempts
                ],
            )
        )
    return DeliveryList(items=items)
