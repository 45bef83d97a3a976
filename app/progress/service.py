"""Progress: stored where only the learner can say it (read, reading position, quick check),
derived where the server already knows it (exercises).

Exercise states are derived on read from the submission table: `attempted` once a submission
exists, `passed` once any of them has the status `passed`. The worker writes results only
through `gradlab.queue.finish`, and it must not know about the web's progress; deriving means
there is no second write that could be missed (a worker that dies between two writes, a
re-leased job, a submission re-owned when an anonymous learner signs in) and nothing that can
drift from the submissions the learner can actually open. The cost is one indexed GROUP BY over
the owner's submissions, which are few (rate-limited) per owner.
"""

import time

from sqlalchemy import case, delete, func
from sqlmodel import Session, select

from app.progress.schemas import ExerciseState, LessonState, ProgressPublic, ProgressUpdate
from gradlab import insight_counts
from gradlab.content.loader import Content
from gradlab.models import LessonProgress, Submission, SubmissionStatus


class UnknownLesson(LookupError):
    pass


class UnknownSection(ValueError):
    pass


def section_ids(content: Content, lesson: str) -> list[str]:
    """The anchors a lesson page has for its reading position: sections, then exercises."""
    spec = content.lessons[lesson].spec
    return [s.id for s in spec.sections] + [f"exercise-{e.id}" for e in spec.exercises]


def _exercise_activity(*, session: Session, owner: str) -> dict[str, tuple[ExerciseState, float]]:
    passed = func.max(case((Submission.status == SubmissionStatus.passed, 1), else_=0))
    rows = session.exec(
        select(Submission.exercise, passed, func.max(Submission.created_at))
        .where(Submission.owner == owner)
        .group_by(Submission.exercise)
    ).all()
    return {
        exercise: ("passed" if any_passed else "attempted", latest)
        for exercise, any_passed, latest in rows
    }


def get(*, session: Session, content: Content, owner: str) -> ProgressPublic:
    rows = {
        row.lesson: row
        for row in session.exec(select(LessonProgress).where(LessonProgress.owner == owner))
    }
    activity = _exercise_activity(session=session, owner=owner)
    lessons: dict[str, LessonState] = {}
    latest: tuple[float, str] | None = None
    for entry in content.course.lessons:
        row = rows.get(entry.id)
        lesson = content.lessons.get(entry.id)
        refs = [f"{entry.id}/{e.id}" for e in lesson.spec.exercises] if lesson else []
        exercises = {ref: activity[ref][0] if ref in activity else "not_started" for ref in refs}
        lessons[entry.id] = LessonState(
            # a passed exercise means the lesson was worked through, whether or not the recap
            # at its end ever scrolled into view
            read=(row.read if row else False) or "passed" in exercises.values(),
            quiz_passed=row.quiz_passed if row else False,
            last_section=row.last_section if row else None,
            exercises=exercises,
        )
        times = [row.updated_at] if row else []
        times += [activity[ref][1] for ref in refs if ref in activity]
        if times and (latest is None or max(times) > latest[0]):
            latest = (max(times), entry.id)
    return ProgressPublic(last_lesson=latest[1] if latest else None, lessons=lessons)


def _row(*, session: Session, owner: str, lesson: str) -> LessonProgress:
    row = session.exec(
        select(LessonProgress).where(LessonProgress.owner == owner, LessonProgress.lesson == lesson)
    ).first()
    return row or LessonProgress(owner=owner, lesson=lesson)


def update(
    *, session: Session, content: Content, owner: str, lesson: str, data: ProgressUpdate
) -> LessonState:
    if lesson not in content.lessons:
        raise UnknownLesson(lesson)
    if data.last_section is not None and data.last_section not in section_ids(content, lesson):
        raise UnknownSection(data.last_section)
    row = _row(session=session, owner=owner, lesson=lesson)
    counted = insight_counts.lesson_keys([row] if row.id is not None else [])
    now = time.time()
    if data.read is not None:
        row.read = data.read
    if data.last_section is not None:
        row.last_section, row.section_at = data.last_section, now
    row.updated_at = now
    session.add(row)
    session.flush()
    insight_counts.progress_changed(session, counted, [row])  # class insight, same transaction
    session.commit()
    return get(session=session, content=content, owner=owner).lessons[lesson]


def record_quiz_passed(*, session: Session, owner: str, lesson: str) -> None:
    row = _row(session=session, owner=owner, lesson=lesson)
    counted = insight_counts.lesson_keys([row] if row.id is not None else [])
    row.quiz_passed, row.updated_at = True, time.time()
    session.add(row)
    session.flush()
    insight_counts.progress_changed(session, counted, [row])  # class insight, same transaction
    session.commit()


def reown(*, session: Session, source: str, target: str) -> None:
    """Move `source`'s progress to `target`, merging lesson by lesson: read and quiz_passed if
    either had them, the reading position reported last (class insight's counters follow).
    The caller commits."""
    both = LessonProgress.owner.in_([source, target])  # type: ignore[attr-defined]
    counted = insight_counts.lesson_keys(session.exec(select(LessonProgress).where(both)).all())
    theirs = {
        row.lesson: row
        for row in session.exec(select(LessonProgress).where(LessonProgress.owner == target))
    }
    for row in session.exec(select(LessonProgress).where(LessonProgress.owner == source)).all():
        kept = theirs.get(row.lesson)
        if kept is None:
            row.owner = target
            session.add(row)
            continue
        kept.read = kept.read or row.read
        kept.quiz_passed = kept.quiz_passed or row.quiz_passed
        if row.section_at is not None and (kept.section_at or 0.0) < row.section_at:
            kept.last_section, kept.section_at = row.last_section, row.section_at
        kept.updated_at = max(kept.updated_at, row.updated_at)
        session.add(kept)
    session.flush()
    session.execute(delete(LessonProgress).where(LessonProgress.owner == source))  # type: ignore[arg-type]
    after = session.exec(select(LessonProgress).where(LessonProgress.owner == target)).all()
    insight_counts.progress_changed(session, counted, after)


def continue_url(state: ProgressPublic, *, content: Content, locale: str) -> str | None:
    """ "Continue where you left off": the last lesson, at its last section."""
    lesson = state.last_lesson
    if lesson is None or lesson not in content.lessons:
        return None
    section = state.lessons[lesson].last_section
    return f"/{locale}/lessons/{lesson}" + (f"#{section}" if section else "")
