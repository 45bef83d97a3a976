"""HTML pages: locale negotiation, course, lesson, exercise form, submission result."""

import math
import time
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Form, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from app.client import client_address
from app.deps import (
    ContentDep,
    LocaleDep,
    OwnerDep,
    SessionDep,
    SettingsDep,
    get_content,
    limit_submissions,
    valid_locale,
)
from app.discovery import base_url, course_links
from app.i18n import negotiate, translations
from app.page_cache import conditional, lesson_response
from app.progress import service as progress
from app.routes.api import QuizAnswer, check_quiz
from app.security.csrf import require_form_token
from app.security.errors import error_page, message_macros, one_line, wants_json
from app.submissions import service as submissions
from app.submissions.schemas import SubmissionCreate
from app.submissions.service import SubmissionRefused
from app.submissions.waiting import wait_for
from app.templating import render, templates
from gradlab.config import Settings
from gradlab.content.loader import Content, lesson_view
from gradlab.models import Submission, SubmissionStatus

# Every unsafe request (each form post) must carry the CSRF token: app/security/csrf.py.
router = APIRouter(include_in_schema=False, dependencies=[Depends(require_form_token)])
LOCALE_COOKIE = "gradlab_locale"
MAX_FRAGMENT_WAIT_S = 30  # the lesson page's script asks again after this
# `until=done`: a job still running after this long is shown running, with its time left
SHOW_RUNNING_AFTER_S = 1.0


@router.get("/")
def root(request: Request) -> RedirectResponse:
    locale = negotiate(request.cookies.get(LOCALE_COOKIE), request.headers.get("accept-language"))
    response = RedirectResponse(f"/{locale}/", status_code=307)
    response.headers["Vary"] = "Accept-Language, Cookie"
    return response


def _remember(response: Response, locale: str) -> Response:
    response.set_cookie(LOCALE_COOKIE, locale, max_age=365 * 24 * 3600, samesite="lax")
    return response


@router.get("/{locale}/", response_class=HTMLResponse)
def course_page(
    request: Request,
    locale: LocaleDep,
    content: ContentDep,
    session: SessionDep,
    owner: OwnerDep,
) -> Response:
    state = progress.get(session=session, content=content, owner=owner)
    page = render(
        request,
        "course.html",
        locale=locale,
        lessons=content.lesson_list(locale),
        progress=state,
        continue_url=progress.continue_url(state, content=content, locale=locale),
        path=lambda loc: f"/{loc}/",
        links=course_links(content, locale=locale, base_url=base_url(request)),
    )
    return _remember(conditional(request, page), locale)  # ETag / 304, private


@router.get("/{locale}/lessons/{lesson}", response_class=HTMLResponse)
async def lesson_page(
    request: Request, locale: str, lesson: str, quiz: str | None = None
) -> Response:
    """Served from app/page_cache.py: rendered once per (lesson, locale, content version),
    per-user parts filled in per request; async and without thread-pool dependencies (each
    sync dependency would cost a thread hop), no database unless someone may be signed in."""
    await valid_locale(locale)
    content = get_content(request)
    if lesson not in content.lessons:
        raise HTTPException(status_code=404, detail=f"unknown lesson {lesson!r}")
    page = await lesson_response(request, content=content, lesson=lesson, locale=locale, quiz=quiz)
    return _remember(page, locale)


@router.post("/{locale}/lessons/{lesson}/quiz")
def quiz_form(
    request: Request,
    locale: LocaleDep,
    lesson: str,
    content: ContentDep,
    answer: Annotated[int, Form()],
    session: SessionDep,
    owner: OwnerDep,
) -> Response:
    """The quick check: without JavaScript it redirects to the lesson with `?quiz=`; the
    page's script (static/js/quiz.js) asks for JSON and shows the outcome in place."""
    result = check_quiz(content, lesson, QuizAnswer(answer=answer, locale=locale))
    if result.correct:
        progress.record_quiz_passed(session=session, owner=owner, lesson=lesson)
    outcome = "correct" if result.correct else "wrong"
    if wants_json(request):
        html = _quiz_outcome(content, lesson=lesson, locale=locale, outcome=outcome)
        return JSONResponse({"correct": result.correct, "outcome": outcome, "html": html})
    return RedirectResponse(f"/{locale}/lessons/{lesson}?quiz={outcome}#quick-check", 303)


def _quiz_outcome(content: Content, *, lesson: str, locale: str, outcome: str) -> str:
    """The outcome under the quiz, in `locale`, as the cached page's `?quiz=` variant has it."""
    view = lesson_view(content, lesson, locale)
    section = next(s for s in view.sections if s.spec.quiz is not None)  # check_quiz found it
    return templates.env.get_template("_quiz_outcome.html").render(
        {
            "locale": locale,
            "translations": translations(locale),
            "section": section,
            "quiz_outcome": outcome,
        }
    )


@router.post(
    "/{locale}/lessons/{lesson}/exercises/{exercise}", dependencies=[Depends(limit_submissions)]
)
def submit_form(
    request: Request,
    locale: LocaleDep,
    lesson: str,
    exercise: str,
    code: Annotated[str, Form()],
    session: SessionDep,
    content: ContentDep,
    settings: SettingsDep,
    owner: OwnerDep,
) -> Response:
    """The exercise form: without JavaScript it redirects to the result page; the page's script
    asks for JSON and polls the result fragment in place."""
    data = SubmissionCreate(exercise=f"{lesson}/{exercise}", code=code, locale=locale)
    try:
        (submission,), _ = submissions.create(
            session=session,
            content=content,
            settings=settings,
            owner=owner,
            items=[data],
            address=client_address(request),
        )
    except SubmissionRefused as refused:
        if wants_json(request):  # the page's script words it under the editor
            response: Response = JSONResponse(
                {
                    "detail": refused.detail,
                    "reason": refused.reason,
                    "message": _refusal_message(refused, locale=locale),
                },
                refused.status,
            )
        else:
            response = _refusal_page(request, refused, locale=locale)
        if refused.retry_after is not None:
            response.headers["Retry-After"] = str(refused.retry_after)
        return response
    page_url = f"/{locale}/submissions/{submission.id}"
    if wants_json(request):
        # the fragment as it is now (queued) comes along: the page shows it at once and then
        # holds one look for the verdict (`until=done`) instead of asking where the job is
        fragment = _fragment(request, submission, content, settings, locale=locale)
        return JSONResponse(
            {
                "id": submission.id,
                "url": page_url,
                "fragment_url": f"{page_url}?fragment=1",
                "status": submission.status,
                "html": fragment.body.decode(),
            },
            status_code=202,
        )
    return RedirectResponse(page_url, status_code=303)


def _refusal_message(refused: SubmissionRefused, *, locale: str) -> str:
    """Why the form's code was refused, in `locale` (one line of plain text)."""
    module = message_macros("_submission_messages.html", locale)
    return one_line(module.message(refused.reason, refused.values))


def _refusal_page(request: Request, refused: SubmissionRefused, *, locale: str) -> Response:
    """A refused form post, worded in the page's language."""
    module = message_macros("_submission_messages.html", locale)
    return error_page(
        request,
        locale=locale,
        status_code=refused.status,
        title=one_line(module.title()),
        message=one_line(module.message(refused.reason, refused.values)),
    )


def _wall_s(content: Content, settings: Settings, exercise: str) -> int | None:
    """The most seconds the exercise lets the learner's code run (None: no longer taught)."""
    definition = content.exercises.get(exercise)
    if definition is None:
        return None
    return math.ceil(settings.learner_wall_s(definition.spec.limits.wall_s))


def _titles(content: Content, exercise: str, locale: str) -> tuple[str, str] | None:
    """(lesson title, exercise title) in `locale`, or None for an exercise no longer taught."""
    lesson = exercise.split("/", 1)[0]
    if lesson not in content.lessons:
        return None
    view = lesson_view(content, lesson, locale)
    for item in view.exercises:
        if item.exercise.ref == exercise:
            return view.title, item.text.title
    return None


@router.get("/{locale}/submissions/{submission_id}", response_class=HTMLResponse)
async def submission_page(
    request: Request,
    locale: LocaleDep,
    submission_id: str,
    session: SessionDep,
    owner: OwnerDep,
    content: ContentDep,
    settings: SettingsDep,
    fragment: bool = False,
    wait: Annotated[float, Query(ge=0, le=MAX_FRAGMENT_WAIT_S)] = 0,
    shown: str | None = None,
    until: Literal["change", "done"] = "change",
) -> Response:
    """The result page, or with `fragment=1` the result alone for the lesson page's script.
    With `wait=N` the fragment is answered as soon as the submission's status differs from
    `shown` (the status the page shows now), or after N s: a result reaches the page the
    moment it is stored, without the page asking again and again. With `until=done` a change
    to "running" does not end the wait unless the code has run for `SHOW_RUNNING_AFTER_S`
    (then the page shows its countdown): a quick grade comes back in one look."""
    submission = await run_in_threadpool(
        submissions.get_owned, session=session, submission_id=submission_id, owner=owner
    )
    if fragment and wait:
        seen = shown or submission.status
        changed = _settled(seen) if until == "done" else lambda now: now.status != seen
        submission = await wait_for(request, session, submission, wait, until=changed)
    if fragment:
        response = await run_in_threadpool(
            _fragment, request, submission, content, settings, locale=locale
        )
    else:
        response = await run_in_threadpool(
            render,
            request,
            "submission.html",
            locale=locale,
            submission=submissions.to_public(submission, content=content, locale=locale),
            lesson=submission.exercise.split("/", 1)[0],
            titles=_titles(content, submission.exercise, locale),
            wall_s=_wall_s(content, settings, submission.exercise),
            path=lambda loc: f"/{loc}/submissions/{submission_id}",
        )
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Gradlab-Status"] = submission.status
    return response


def _settled(shown: str) -> Callable[[Submission], bool]:
    """`until=done`: a status the page must see now, given that it shows `shown`."""
    running_since: list[float] = []

    def settled(now: Submission) -> bool:
        if now.status == shown:
            return False
        if now.status != SubmissionStatus.running:
            return True  # graded (or queued again, after a worker was lost)
        running_since[:] = running_since or [time.monotonic()]
        return time.monotonic() - running_since[0] >= SHOW_RUNNING_AFTER_S

    return settled


def _fragment(
    request: Request,
    submission: Submission,
    content: Content,
    settings: Settings,
    *,
    locale: str,
) -> HTMLResponse:
    """The result alone (`_result.html`), for the lesson page's script: no page heading, so
    a look (held, repeated) never builds the lesson view."""
    return render(
        request,
        "_result.html",
        locale=locale,
        submission=submissions.to_public(submission, content=content, locale=locale),
        lesson=submission.exercise.split("/", 1)[0],
        titles=None,
        wall_s=_wall_s(content, settings, submission.exercise),
        path=lambda loc: f"/{loc}/submissions/{submission.id}",
    )
