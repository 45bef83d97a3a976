"""Class insight: `GET /api/v1/insights` (JSON), `/api/v1/insights.csv`, and the page
`/{locale}/insights`, for grader tokens and instructor accounts (counts only, never who)."""

import csv
import io
from datetime import date
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from app.accounts.auth import unauthorized
from app.client import client_address
from app.deps import (
    AuthDep,
    ContentDep,
    LocaleDep,
    OwnerDep,
    SessionDep,
    SettingsDep,
    enforce_limit,
)
from app.insights import hints, service
from app.insights.access import access
from app.insights.charts import bar_chart
from app.insights.schemas import InsightsPublic
from app.submissions.schemas import Locale
from app.templating import render
from gradlab.config import LOCALES
from gradlab.content.loader import Content

router = APIRouter(tags=["insights"])

ExerciseQuery = Annotated[
    str | None, Query(max_length=200, description="`<lesson>/<exercise>`; all when absent")
]
LocaleQuery = Annotated[Locale | None, Query(description="only submissions in this language")]
SinceQuery = Annotated[date | None, Query(description="from this day (UTC), ISO 8601")]
UntilQuery = Annotated[date | None, Query(description="to this day (UTC), inclusive")]


def _filters(
    content: Content,
    exercise: str | None,
    locale: str | None,
    since: date | None,
    until: date | None,
) -> service.Filters:
    if exercise is not None and exercise not in content.exercises:
        raise HTTPException(404, detail=f"unknown exercise {exercise!r}")
    if since is not None and until is not None and since > until:
        raise HTTPException(422, detail="`since` is after `until`")
    return service.Filters(exercise=exercise, locale=locale, since=since, until=until)


def _check_access(session: SessionDep, auth: AuthDep) -> None:
    """401 without credentials, 403 for an account that is not an instructor."""
    granted = access(session=session, auth=auth)
    if granted == "anonymous":
        raise unauthorized("class insight needs a grader token or an instructor account")
    if granted == "not_instructor":
        raise HTTPException(403, detail="class insight is for instructor accounts")


CSV_COLUMNS = ["scope", "id", "metric", "key", "value"]
EXERCISE_COUNTS = (
    "submissions",
    "graded",
    "passed",
    "pass_rate",
    "learners",
    "learners_passed",
    "learners_with_hints",
)
SPREADS = ("attempts_to_pass", "hints_before_pass", "seconds_to_pass")


def to_csv(report: InsightsPublic) -> str:
    """One row per value: scope (exercise | lesson), id, metric, key (a diagnosis code, an
    error kind, a section, median | p90; empty otherwise), value (empty: none)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)

    def cell(value: Any) -> Any:
        return "" if value is None else value

    for item in report.exercises:
        for metric in EXERCISE_COUNTS:
            writer.writerow(["exercise", item.exercise, metric, "", cell(getattr(item, metric))])
        for code, n in item.diagnoses.items():
            writer.writerow(["exercise", item.exercise, "diagnosis", code, n])
        for kind, n in item.error_kinds.items():
            writer.writerow(["exercise", item.exercise, "error_kind", kind, n])
        for metric in SPREADS:
            spread = getattr(item, metric)
            writer.writerow(["exercise", item.exercise, metric, "median", cell(spread.median)])
            writer.writerow(["exercise", item.exercise, metric, "p90", cell(spread.p90)])
    for lesson in report.lessons:
        for metric in ("learners", "read", "quiz_passed"):
            writer.writerow(["lesson", lesson.lesson, metric, "", getattr(lesson, metric)])
        for section, n in lesson.last_section.items():
            writer.writerow(["lesson", lesson.lesson, "last_section", section, n])
    return out.getvalue()


def _csv_response(report: InsightsPublic) -> Response:
    name = "gradlab-insights"
    if report.exercise:
        name += "-" + report.exercise.replace("/", "-")
    if report.locale:
        name += f"-{report.locale}"
    return Response(
        to_csv(report).encode("utf-8"),
        media_type="text/csv; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="{name}.csv"',
            "Cache-Control": "no-store",
        },
    )


@router.get("/api/v1/insights", response_model=InsightsPublic)
def get_insights(
    session: SessionDep,
    auth: AuthDep,
    content: ContentDep,
    exercise: ExerciseQuery = None,
    locale: LocaleQuery = None,
    since: SinceQuery = None,
    until: UntilQuery = None,
    format: Literal["json", "csv"] = "json",
) -> Any:
    """Per exercise: submissions, learners, pass rate, diagnosis codes and error kinds with
    their counts, attempts and hints before the first pass, time to it (median, p90); per
    lesson: reading position and quick check. Grader tokens and instructors; `?format=csv`."""
    _check_access(session, auth)
    filters = _filters(content, exercise, locale, since, until)
    report = service.compute(session=session, content=content, filters=filters)
    return _csv_response(report) if format == "csv" else report


@router.get("/api/v1/insights.csv", response_class=Response)
def get_insights_csv(
    session: SessionDep,
    auth: AuthDep,
    content: ContentDep,
    exercise: ExerciseQuery = None,
    locale: LocaleQuery = None,
    since: SinceQuery = None,
    until: UntilQuery = None,
) -> Response:
    """The same as CSV: `scope,id,metric,key,value`, one row per value."""
    _check_access(session, auth)
    filters = _filters(content, exercise, locale, since, until)
    return _csv_response(service.compute(session=session, content=content, filters=filters))


# --- hints opened (the lesson page reports them: static/js/hints.js) -----------------------


class HintOpened(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exercise: str = Field(max_length=200, description="`<lesson>/<exercise>`")
    hint: int = Field(ge=1, le=100, description="1-based: opening hint N means 1..N were shown")


class HintsPublic(BaseModel):
    exercise: str
    hints_opened: int


@router.post("/api/v1/progress/hints", response_model=HintsPublic, tags=["progress"])
def report_hint(
    request: Request,
    data: HintOpened,
    session: SessionDep,
    content: ContentDep,
    settings: SettingsDep,
    owner: OwnerDep,
) -> HintsPublic:
    """Record that the learner opened hints 1..`hint` of an exercise (each kept at the time it
    was first opened); answers the highest opened. 404: unknown exercise; 422: no such hint."""
    enforce_limit(
        request,
        f"hint:{client_address(request)}",
        limit=settings.draft_rate_limit,
        window_s=settings.rate_window_s,
    )
    try:
        highest = hints.record(
            session=session, content=content, owner=owner, exercise=data.exercise, hint=data.hint
        )
    except hints.UnknownExercise:
        raise HTTPException(404, detail=f"unknown exercise {data.exercise!r}") from None
    except hints.UnknownHint:
        count = hints.hint_count(content, data.exercise)
        raise HTTPException(422, detail=f"{data.exercise!r} has {count} hints") from None
    return HintsPublic(exercise=data.exercise, hints_opened=highest)


# --- the page -------------------------------------------------------------------------------


def _exercise_title(content: Content, ref: str, locale: str) -> str:
    found = content.exercises[ref]
    texts = content.lessons[found.lesson].texts
    for loc in (locale, "en"):
        text = texts.get(loc)
        if text and found.spec.id in text.exercises:
            return text.exercises[found.spec.id].title
    return ref


def _section_title(content: Content, lesson: str, section: str, locale: str) -> str:
    if section.startswith("exercise-"):
        ref = f"{lesson}/{section.removeprefix('exercise-')}"
        return _exercise_title(content, ref, locale) if ref in content.exercises else section
    texts = content.lessons[lesson].texts
    for loc in (locale, "en"):
        text = texts.get(loc)
        part = text.sections.get(section) if text else None
        if part is not None and part.title:
            return part.title
    return section


def _parse_day(value: str | None) -> date | None:
    return date.fromisoformat(value) if value else None


@router.get("/{locale}/insights", response_class=HTMLResponse, include_in_schema=False)
def insights_page(
    request: Request,
    locale: LocaleDep,
    session: SessionDep,
    auth: AuthDep,
    content: ContentDep,
    exercise: Annotated[str | None, Query(max_length=200)] = None,
    language: Annotated[str | None, Query(max_length=8)] = None,
    since: Annotated[str | None, Query(max_length=32)] = None,
    until: Annotated[str | None, Query(max_length=32)] = None,
) -> Response:
    """Tables and bar charts of class insight; a polite refusal for anyone else."""
    page: dict[str, Any] = {
        "path": lambda loc: f"/{loc}/insights",
        "exercise_choices": [
            (ref, _exercise_title(content, ref, locale))
            for ref in service.course_exercises(content)
        ],
        "chosen": {
            "exercise": exercise or "",
            "language": language or "",
            "since": since or "",
            "until": until or "",
        },
    }
    granted = access(session=session, auth=auth)
    if granted != "granted":
        status = 401 if granted == "anonymous" else 403
        response = render(
            request, "insights.html", locale=locale, status_code=status, refused=granted, **page
        )
        response.headers["Cache-Control"] = "no-store"
        return response
    problem = False
    status = 200
    try:
        if language and language not in LOCALES:
            raise ValueError(language)
        filters = _filters(
            content, exercise or None, language or None, _parse_day(since), _parse_day(until)
        )
    except (ValueError, HTTPException) as exc:
        status = exc.status_code if isinstance(exc, HTTPException) else 422
        problem = True
        filters = service.Filters()
    report = service.compute(session=session, content=content, filters=filters)
    lesson_titles = {entry.id: entry.title for entry in content.lesson_list(locale)}
    exercises = [
        {
            "item": item,
            "title": _exercise_title(content, item.exercise, locale),
            "diagnoses": bar_chart([(k, v) for k, v in item.diagnoses.items() if v]),
            "errors": bar_chart([(k, v) for k, v in item.error_kinds.items() if v]),
        }
        for item in report.exercises
    ]
    lessons = [
        {
            "item": lesson,
            "title": lesson_titles.get(lesson.lesson, lesson.lesson),
            "reading": bar_chart(
                [
                    (_section_title(content, lesson.lesson, section, locale), n)
                    for section, n in lesson.last_section.items()
                ]
            ),
        }
        for lesson in report.lessons
    ]
    response = render(
        request,
        "insights.html",
        locale=locale,
        status_code=status,
        refused=None,
        problem=problem,
        report=report,
        exercises=exercises,
        lessons=lessons,
        csv_url="/api/v1/insights.csv" + (f"?{query}" if (query := _api_query(filters)) else ""),
        **page,
    )
    response.headers["Cache-Control"] = "no-store"
    return response


def _api_query(filters: service.Filters) -> str:
    pairs = {
        "exercise": filters.exercise,
        "locale": filters.locale,
        "since": filters.since.isoformat() if filters.since else None,
        "until": filters.until.isoformat() if filters.until else None,
    }
    return urlencode({k: v for k, v in pairs.items() if v})
