"""REST API v1 (JSON): exercises, lessons, quiz (submissions: app/routes/submissions.py)."""

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from app.deps import ContentDep, OwnerDep, SessionDep
from app.progress import service as progress
from app.rendering import reading_minutes
from gradlab.config import DEFAULT_LOCALE, LOCALES
from gradlab.content.loader import lesson_view

router = APIRouter(prefix="/api/v1", tags=["api"])


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
