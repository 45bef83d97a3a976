"""What search engines need to find the right page for every language: canonical links,
`hreflang` alternates with an `x-default`, and the sitemap's entries.

A locale's page counts as a real translation only when nothing on it falls back to English.
A partly translated page is not offered as an alternate, and its canonical link points to the
English page whose text it mostly shows, so that the two are never indexed as duplicates.
"""

from dataclasses import dataclass

from starlette.requests import Request

from gradlab.config import DEFAULT_LOCALE, LOCALES
from gradlab.content.loader import Content, lesson_view


@dataclass(frozen=True)
class PageLinks:
    canonical: str  # absolute URL
    alternates: dict[str, str]  # hreflang ("en", ..., "x-default") -> absolute URL


def base_url(request: Request) -> str:
    """`GRADLAB_PUBLIC_BASE_URL`, or else the address this request was sent to (its scheme and
    Host: a server run without the setting names whatever host and port served it)."""
    configured = request.app.state.settings.public_base_url
    return (configured or f"{request.url.scheme}://{request.url.netloc}").rstrip("/")


def course_path(locale: str) -> str:
    return f"/{locale}/"


def lesson_path(locale: str, lesson: str) -> str:
    return f"/{locale}/lessons/{lesson}"


def _course_translated(content: Content, locale: str) -> bool:
    return all(locale in entry.title for entry in content.course.lessons)


def _lesson_translated(content: Content, lesson: str, locale: str) -> bool:
    return locale == DEFAULT_LOCALE or not lesson_view(content, lesson, locale).untranslated


def _links(base_url: str, locale: str, paths: dict[str, str], x_default: str) -> PageLinks:
    base = base_url.rstrip("/")
    canonical = paths.get(locale, paths[DEFAULT_LOCALE])
    alternates = {loc: base + path for loc, path in paths.items()}
    alternates["x-default"] = base + x_default
    return PageLinks(canonical=base + canonical, alternates=alternates)


def course_links(content: Content, *, locale: str, base_url: str) -> PageLinks:
    paths = {loc: course_path(loc) for loc in LOCALES if _course_translated(content, loc)}
    paths[DEFAULT_LOCALE] = course_path(DEFAULT_LOCALE)
    return _links(base_url, locale, paths, "/")  # `/` sends each visitor to their language


def lesson_links(content: Content, *, lesson: str, locale: str, base_url: str) -> PageLinks:
    paths = {
        loc: lesson_path(loc, lesson) for loc in LOCALES if _lesson_translated(content, lesson, loc)
    }
    return _links(base_url, locale, paths, lesson_path(DEFAULT_LOCALE, lesson))


def sitemap_pages(content: Content, *, base_url: str) -> list[PageLinks]:
    """Every canonical page once (fallback pages are left out), with its alternates."""
    pages = []
    course = [course_links(content, locale=loc, base_url=base_url) for loc in LOCALES]
    lessons = [
        lesson_links(content, lesson=lesson, locale=loc, base_url=base_url)
        for lesson in [entry.id for entry in content.course.lessons]
        if lesson in content.lessons
        for loc in LOCALES
    ]
    for links in course + lessons:
        if links.canonical in links.alternates.values() and links not in pages:
            pages.append(links)
    return pages
