"""The one way a submission is made, by the exercise form and the API alike: check every item,
then store them with their jobs (and an idempotency key) in one transaction.

A refusal is a `SubmissionRefused`: its HTTP status, a `reason` that a page words in the
learner's language (templates/_submission_messages.html), and the API's English `detail`.
Nothing is stored unless every item passes, so a refusal never leaves half a batch behind.
"""

import json

from fastapi import HTTPException
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from app import idempotency
from app.submissions.capacity import check_capacity
from app.submissions.errors import SubmissionRefused
from app.submissions.schemas import SubmissionCreate, SubmissionPublic
from gradlab import doorbell, queue, webhooks
from gradlab.config import Settings
from gradlab.content.loader import Content
from gradlab.models import Submission
from gradlab.result_text import localize_result

__all__ = ["SubmissionRefused", "check", "check_code", "create", "get_owned", "to_public"]


def _position(code: str, index: int) -> tuple[int, int]:
    """(line, column), both from 1, of the character at `index`."""
    line_start = code.rfind("\n", 0, index) + 1
    return code.count("\n", 0, index) + 1, index - line_start + 1


def check_code(code: str, *, settings: Settings) -> None:
    """The one check of a learner's code, wherever it is stored (a submission, a draft)."""
    try:
        size = len(code.encode("utf-8"))
    except UnicodeEncodeError as exc:
        # Only a JSON `\ud800` escape makes such a string; no database stores it as text.
        line, column = _position(code, exc.start)
        raise SubmissionRefused(
            422,
            "not_text",
            f"code is not valid text: a lone surrogate ({code[exc.start]!r}) at line {line}, "
            f"column {column}",
            line=line,
        ) from None
    if size > settings.max_code_bytes:
        raise SubmissionRefused(
            413,
            "too_large",
            f"code is {size} bytes; the limit is {settings.max_code_bytes}",
            size=size,
            limit=settings.max_code_bytes,
        )
    if "\0" in code:
        # Python refuses to compile it and PostgreSQL refuses to store it: say where it is.
        line, column = _position(code, code.index("\0"))
        raise SubmissionRefused(
            422,
            "nul",
            f"code contains a NUL character (\\x00) at line {line}, column {column}",
            line=line,
        )


def check(item: SubmissionCreate, *, content: Content, settings: Settings, owner: str) -> None:
    """Everything a submission must satisfy before it is stored."""
    if item.exercise not in content.exercises:
        raise SubmissionRefused(404, "unknown_exercise", f"unknown exercise {item.exercise!r}")
    check_code(item.code, settings=settings)
    if item.callback_url is not None:
        if not owner.startswith("grader:"):
            raise SubmissionRefused(
                403, "callback", "callback_url needs a grader token (`gradlab token create`)"
            )
        try:
            webhooks.check_callback_url(
                item.callback_url, allow_private=settings.webhook_allow_private
            )
        except webhooks.CallbackUrlError as exc:
            raise SubmissionRefused(422, "callback", str(exc)) from None


def _load(session: Session, ids: list[str]) -> list[Submission]:
    found = [session.get(Submission, i) for i in ids]
    return [s for s in found if s is not None]


def create(
    *,
    session: Session,
    content: Content,
    settings: Settings,
    owner: str,
    items: list[SubmissionCreate],
    key: str | None = None,
    digest: str = "",
    batch: bool = False,
    address: str | None = None,
) -> tuple[list[Submission], bool]:
    """(the submissions, whether an earlier request with the same key made them). All or
    nothing: every item is checked before any is stored; a batch's refusal names every refused
    item (`items[3]: ...`) and carries the first one's status."""
    if key is not None:
        ids = idempotency.recall(session=session, owner=owner, key=key, digest=digest)
        if ids is not None:
            return _load(session, ids), True
    refusals: list[SubmissionRefused] = []
    for index, item in enumerate(items):
        try:
            check(item, content=content, settings=settings, owner=owner)
        except SubmissionRefused as refused:
            if batch:
                refused.detail = f"items[{index}]: {refused.detail}"
            refusals.append(refused)
    if refusals:
        first = refusals[0]
        if len(refusals) > 1:
            first.detail = "; ".join(r.detail for r in refusals)
        raise first
    check_capacity(
        session=session, settings=settings, owner=owner, address=address, count=len(items)
    )
    made = [
        queue.stage(
            session=session,
            exercise=item.exercise,
            code=item.code,
            locale=item.locale,
            owner=owner,
            callback_url=item.callback_url,
            client_address=address,
        )
        for item in items
    ]
    if key is not None:
        idempotency.remember(
            session=session,
            owner=owner,
            key=key,
            digest=digest,
            ids=[s.id for s in made],
            ttl_s=settings.idempotency_ttl_s,
        )
    try:
        session.commit()
    except IntegrityError:  # a concurrent request with the same key won the race
        session.rollback()
        if key is None:
            raise
        ids = idempotency.recall(session=session, owner=owner, key=key, digest=digest)
        if ids is None:
            raise
        return _load(session, ids), True
    for submission in made:
        session.refresh(submission)
    doorbell.ring(settings, doorbell.WORKER)  # idle workers claim it now, not at their next poll
    return made, False


def get_owned(*, session: Session, submission_id: str, owner: str) -> Submission:
    """The submission if `owner` owns it; 404 otherwise (existence is not revealed)."""
    submission = session.get(Submission, submission_id)
    if submission is None or submission.owner != owner:
        raise HTTPException(status_code=404, detail="submission not found")
    return submission


def to_public(
    submission: Submission, *, content: Content | None = None, locale: str | None = None
) -> SubmissionPublic:
    """The submission as the API shows it; with `content` and `locale`, its result's messages
    written in `locale` where they keep their source (else as stored)."""
    result = json.loads(submission.result_json) if submission.result_json else None
    if result is not None and content is not None and locale is not None:
        result = localize_result(
            result, content=content, exercise=submission.exercise, locale=locale
        )
    return SubmissionPublic(
        id=submission.id,
        exercise=submission.exercise,
        locale=submission.locale,
        status=submission.status,
        url=f"/api/v1/submissions/{submission.id}",
        created_at=submission.created_at,
        finished_at=submission.finished_at,
        result=result,
    )
