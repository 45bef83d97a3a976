"""Hints opened: one row per (owner, exercise, hint), kept at the first time it was opened.
Opening hint N records hints 1..N (the ladder shows them in order). Keyword-only functions over
a session, like the other services."""

import time

from sqlalchemy import delete, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from gradlab import insight_counts
from gradlab.content.loader import Content
from gradlab.models import HintOpen


class UnknownExercise(LookupError):
    pass


class UnknownHint(ValueError):
    pass


def hint_count(content: Content, exercise: str) -> int:
    """How many hints the exercise has (the English text; every locale has as many)."""
    found = content.exercises.get(exercise)
    if found is None:
        raise UnknownExercise(exercise)
    text = content.lessons[found.lesson].texts["en"].exercises.get(found.spec.id)
    return len(text.hints) if text else 0


def opened(*, session: Session, owner: str, exercise: str) -> int:
    """The highest hint `owner` opened (0: none)."""
    highest = session.exec(
        select(func.max(HintOpen.hint)).where(
            HintOpen.owner == owner, HintOpen.exercise == exercise
        )
    ).one()
    return int(highest or 0)


def record(*, session: Session, content: Content, owner: str, exercise: str, hint: int) -> int:
    """Record that `owner` opened hints 1..`hint`; returns the highest opened so far."""
    if not 1 <= hint <= hint_count(content, exercise):
        raise UnknownHint(hint)
    for _ in range(2):  # a concurrent report of the same hint loses the race once, then sees it
        have = set(
            session.exec(
                select(HintOpen.hint).where(
                    HintOpen.owner == owner, HintOpen.exercise == exercise, HintOpen.hint <= hint
                )
            ).all()
        )
        now = time.time()
        for number in range(1, hint + 1):
            if number not in have:
                session.add(HintOpen(owner=owner, exercise=exercise, hint=number, opened_at=now))
        try:
            session.flush()
            if 1 not in have:  # a learner with hints from now on (class insight's counters)
                insight_counts.hint_opened(session, owner, exercise, now)
            session.commit()
            break
        except IntegrityError:
            session.rollback()
    return opened(session=session, owner=owner, exercise=exercise)


def reown(*, session: Session, source: str, target: str) -> None:
    """Move `source`'s hints to `target`; a hint both opened keeps the earlier time. The caller
    commits."""
    theirs = {
        (row.exercise, row.hint): row
        for row in session.exec(select(HintOpen).where(HintOpen.owner == target)).all()
    }
    mine = session.exec(select(HintOpen).where(HintOpen.owner == source)).all()
    moving = []
    for row in mine:
        kept = theirs.get((row.exercise, row.hint))
        if kept is None:
            moving.append((row.exercise, row.hint, row.opened_at))
        elif row.opened_at < kept.opened_at:
            kept.opened_at = row.opened_at
            session.add(kept)
    session.execute(delete(HintOpen).where(HintOpen.owner == source))  # type: ignore[arg-type]
    session.flush()
    for exercise, hint, at in moving:
        session.add(HintOpen(owner=target, exercise=exercise, hint=hint, opened_at=at))
    session.flush()
