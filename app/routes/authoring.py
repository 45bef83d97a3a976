"""For authors and translators: the translation status of every lesson x locale, and the
problems of a content edit the server refused (it keeps serving the last good version)."""

from datetime import UTC, datetime
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel

from app.deps import ContentDep, ContentStoreDep, LocaleDep
from app.templating import render
from gradlab.content.translation import LocaleStatus, translation_status
from gradlab.content.yamlfile import Problem

router = APIRouter(tags=["authoring"])


class ContentProblemPublic(BaseModel):
    file: str
    line: int
    message: str


class TranslationStatusPublic(BaseModel):
    lesson: str
    locale: str
    file: str
    exists: bool
    translated_share: float
    outdated: list[str]
    missing: list[str]
    unstamped: list[str]


class TranslationsPublic(BaseModel):
    items: list[TranslationStatusPublic]
    content_loaded_at: datetime
    # Problems of the last content edit, which was refused; null when the files on disk are
    # what is being served.
    content_errors: list[ContentProblemPublic] | None


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _status_public(status: LocaleStatus, root: Path) -> TranslationStatusPublic:
    return TranslationStatusPublic(
        lesson=status.lesson,
        locale=status.locale,
        file=_relative(status.file, root),
        exists=status.exists,
        translated_share=round(status.translated_share, 4),
        outdated=status.keys("outdated"),
        missing=status.keys("missing"),
        unstamped=status.keys("unstamped"),
    )


def _problem_public(problem: Problem, root: Path) -> ContentProblemPublic:
    return ContentProblemPublic(
        file=_relative(problem.file, root), line=problem.line, message=problem.message
    )


def translations_report(content: ContentDep, store: ContentStoreDep) -> TranslationsPublic:
    root = store.content_dir
    error = store.error
    return TranslationsPublic(
        items=[_status_public(status, root) for status in translation_status(content)],
        content_loaded_at=datetime.fromtimestamp(store.loaded_at, UTC),
        content_errors=None
        if error is None
        else [_problem_public(problem, root) for problem in error.problems],
    )


@router.get("/api/v1/translations", response_model=TranslationsPublic)
def get_translations(content: ContentDep, store: ContentStoreDep) -> TranslationsPublic:
    """Per lesson x locale: the share of English words translated, outdated and missing parts;
    and the problems of a refused content edit, if any."""
    return translations_report(content, store)


@router.get(
    "/{locale}/authoring/translations", response_class=HTMLResponse, include_in_schema=False
)
def translations_page(
    request: Request, locale: LocaleDep, content: ContentDep, store: ContentStoreDep
) -> Response:
    response = render(
        request,
        "translations.html",
        locale=locale,
        report=translations_report(content, store),
        # each lesson by its title in the page's language (English where not translated yet)
        lesson_titles={entry.id: entry.title for entry in content.lesson_list(locale)},
        path=lambda loc: f"/{loc}/authoring/translations",
    )
    response.headers["Cache-Control"] = "no-store"
    return response
