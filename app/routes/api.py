"""REST API v1 (JSON): submissions, exercises, lessons, quiz."""

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from sqlmodel import Session

from app import submissions
from app.deps import ContentDep, OwnerDep, SessionDep, SettingsDep, limit_submissions
from app.progress import service as progress
from app.rendering import reading_minutes
from app.submissions import SubmissionCreate, SubmissionPublic
from gradlab.config import DEFAULT_LOCALE, LOCALES
from gradlab.content.loader import lesson_view
from gradlab.models import Submission, SubmissionStatus

router = APIRouter(prefix="/api/v1", tags=["api"])
MAX_WAIT_S = 60
DONE = {SubmissionStatus.passed, SubmissionStatus.failed, SubmissionStatus.error}


@router.post(
    "/submissions",
    status_code=202,
    response_model=SubmissionPublic,
    dependencies=[Depends(limit_submissions)],
)
async def create_submission(
    data: SubmissionCreate,
    session: SessionDep,
    content: ContentDep,
    settings: SettingsDep,
    owner: OwnerDep,
    response: Response,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 0,
) -> SubmissionPublic:
    """Queue code for grading; with `?wait=N`, hold up to N s and answer 200 once graded."""
    # Database calls run in the thread pool: the event loop never waits on SQLite or a lock.
    submission = await run_in_threadpool(
        submissions.create,
        session=session,
        content=content,
        settings=settings,
        data=data,
        owner=owner,
    )
    if wait > 0:
        submission = await _wait_for(session, submission, wait, settings.poll_interval_s)
        if submission.status in DONE:
            response.status_code = 200
    return submissions.to_public(submission)


async def _wait_for(
    session: Session, submission: Submission, wait_s: float, poll_s: float
) -> Submission:
    deadline = time.monotonic() + wait_s
    while submission.status not in DONE and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        await run_in_threadpool(session.refresh, submission)
    return submission


@router.get("/submissions/{submission_id}", response_model=SubmissionPublic)
def read_submission(submission_id: str, session: SessionDep, owner: OwnerDep) -> SubmissionPublic:
    submission = submissions.get_owned(session=session, submission_id=submission_id, owner=owner)
    return submissions.to_public(submission)


@router.get("/exercises")
def list_exercises(content: ContentDep) -> dict[str, list[dict[str, Any]]]:
    return {
        "items": [
            {
                "id": ref,
                "lesson": ex.lesson,
                "exercise": ex.spec.id,
                "device": ex.spec.device,
                "starter_code": ex.starter_code,
            }
            for ref, ex in content.exercises.items()
        ]
    }


@router.get("/lessons")
def list_lessons(
    content: ContentDep, locale: Annotated[str, Query()] = DEFAULT_LOCALE
) -> dict[str, Any]:
    if locale not in LOCALES:
        raise HTTPException(status_code=422, detail=f"locale must be one of {list(LOCALES)}")
    items = []
    for entry in content.lesson_list(locale):
        item: dict[str, Any] = {**entry.__dict__, "url": None}
        if entry.available:
            view = lesson_view(content, entry.id, locale)
            item.update(
                url=f"/{locale}/lessons/{entry.id}",
                subtitle=view.subtitle,
                reading_minutes=reading_minutes(view),
                fully_translated=not view.untranslated,
            )
        items.append(item)
    return {"course": content.course.id, "locale": locale, "items": items}


class QuizAnswer(BaseModel):
    answer: int
    locale: str = DEFAULT_LOCALE


class QuizResult(BaseModel):
    correct: bool
    explanation: str


def check_quiz(content: ContentDep, lesson: str, answer: QuizAnswer) -> QuizResult:
    """Server-side check of a lesson's quick check (the answer key never reaches the page)."""
    if lesson not in content.lessons:
        raise HTTPException(status_code=404, detail=f"unknown lesson {lesson!r}")
    locale = answer.locale if answer.locale in LOCALES else DEFAULT_LOCALE
    view = lesson_view(content, lesson, locale)
    quiz = next((s for s in view.sections if s.spec.quiz is not None), None)
    if quiz is None or quiz.spec.quiz is None:
        raise HTTPException(status_code=404, detail="this lesson has no quick check")
    if not 0 <= answer.answer < quiz.spec.quiz.options:
        raise HTTPException(status_code=422, detail="answer is not one of the options")
    return QuizResult(
        correct=answer.answer == quiz.spec.quiz.answer, explanation=quiz.text.explanation or ""
    )


@router.post("/lessons/{lesson}/quiz", response_model=QuizResult)
def answer_quiz(
    lesson: str, answer: QuizAnswer, content: ContentDep, session: SessionDep, owner: OwnerDep
) -> QuizResult:
    """Check the answer; a correct one is recorded in the learner's progress (quiz_passed)."""
    result = check_quiz(content, lesson, answer)
    if result.correct:
        progress.record_quiz_passed(session=session, owner=owner, lesson=lesson)
    return result
