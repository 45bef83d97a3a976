"""Draft service: one draft per (owner, exercise); the newer one wins when owners merge."""

import time

from sqlalchemy import delete
from sqlmodel import Session, select

from app.drafts.schemas import DraftPublic
from gradlab.models import Draft

EMPTY = DraftPublic(code=None, updated_at=None)


def _find(*, session: Session, owner: str, exercise: str) -> Draft | None:
    return session.exec(
        select(Draft).where(Draft.owner == owner, Draft.exercise == exercise)
    ).first()


def get(*, session: Session, owner: str, exercise: str) -> DraftPublic:
    draft = _find(session=session, owner=owner, exercise=exercise)
    return DraftPublic(code=draft.code, updated_at=draft.updated_at) if draft else EMPTY


def put(*, session: Session, owner: str, exercise: str, code: str) -> DraftPublic:
    draft = _find(session=session, owner=owner, exercise=exercise) or Draft(
        owner=owner, exercise=exercise, code=code
    )
    draft.code, draft.updated_at = code, time.time()
    session.add(draft)
    session.commit()
    return DraftPublic(code=draft.code, updated_at=draft.updated_at)


def remove(*, session: Session, owner: str, exercise: str) -> None:
    session.execute(
        delete(Draft).where(Draft.owner == owner, Draft.exercise == exercise)  # type: ignore[arg-type]
    )
    session.commit()


def reown(*, session: Session, source: str, target: str) -> None:
    """Move `source`'s drafts to `target`; where both have one, keep the newer. The caller
    commits."""
    theirs = {d.exercise: d for d in session.exec(select(Draft).where(Draft.owner == target)).all()}
    for draft in session.exec(select(Draft).where(Draft.owner == source)).all():
        kept = theirs.get(draft.exercise)
        if kept is None:
            draft.owner = target
            session.add(draft)
        elif draft.updated_at > kept.updated_at:
            kept.code, kept.updated_at = draft.code, draft.updated_at
            session.add(kept)
    session.flush()
    session.execute(delete(Draft).where(Draft.owner == source))  # type: ignore[arg-type]
