"""HTML pages: locale negotiation, course, lesson, exercise form, submission result."""

import math
from typing import Annotated

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
from app.i18n import negotiate
from app.page_cache import conditional, lesson_response
from app.progress import service as progress
from app.routes.api import QuizAnswer, check_quiz
from app.security.csrf import require_form_token
from app.security.errors import error_page, message_macros, one_line, wants_json
from app.submissions import service as submissions
from app.submissions.schemas import SubmissionCreate
from app.submissions.service import SubmissionRefused
from app.submissions.waiting import wait_for
from app.templating import render
from gradlab.config import Settings
from gradlab.content.loader import Content, lesson_view

# Every unsafe request (each form post) must carry the CSRF token: app/security/csrf.py.
router = APIRouter(include_in_schema=False, dependencies=[Depends(require_form_token)])
LOCALE_COOKIE = "gradlab_locale"
MAX_FRAGMENT_WAIT_S = 30  # the lesson page's script asks again after this


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
    locale: LocaleDep,
    lesson: str,
    content: ContentDep,
    answer: Annotated[int, Form()],
    session: SessionDep,
    owner: OwnerDep,
) -> RedirectResponse:
    result = check_quiz(content, lesson, QuizAnswer(answer=answer, locale=locale))
    if result.correct:
        progress.record_quiz_passed(session=session, owner=owner, lesson=lesson)
    outcome = "correct" if result.correct else "wrong"
    return RedirectResponse(f"/{locale}/lessons/{lesson}?quiz={outcome}#quick-check", 303)


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
        if wants_json(request):  # the page's script shows the detail under the editor
            response: Response = JSONResponse({"detail": refused.detail}, refused.status)
        else:
            response = _refusal_page(request, refused, locale=locale)
        if refused.retry_after is not None:
            response.headers["Retry-After"] = str(refused.retry_after)
        return response
    page_url = f"/{locale}/submissions/{submission.id}"
    if wants_json(request):
        return JSONResponse(
            {"id": submission.id, "url": page_url, "fragment_url": f"{page_url}?fragment=1"},
            status_code=202,
        )
    return RedirectResponse(page_url, status_code=303)


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
) -> Response:
    """The result page, or with `fragment=1` the result alone for the lesson page's script.
    With `wait=N` the fragment is answered as soon as the submission's status differs from
    `shown` (the status the page shows now), or after N s: a result reaches the page the
    moment it is stored, without the page asking again and again."""
    submission = await run_in_threadpool(
        submissions.get_owned, session=session, submission_id=submission_id, owner=owner
    )
    if fragment and wait:
        seen = shown or submission.status
        submission = await wait_for(
            request, session, submission, wait, until=lambda now: now.status != seen
        )
    public = submissions.to_public(submission)
    lesson = submission.exercise.split("/", 1)[0]
    template = "_result.html" if fragment else "submission.html"
    response = await run_in_threadpool(
        render,
        request,
        template,
        locale=locale,
        submission=public,
        lesson=lesson,
        # the heading of the whole page only: a fragment look (held, repeated) skips the view
        titles=None if fragment else _titles(content, submission.exercise, locale),
        wall_s=_wall_s(content, settings, submission.exercise),
        path=lambda loc: f"/{loc}/submissions/{submission_id}",
    )
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Gradlab-Status"] = public.status
    return response
