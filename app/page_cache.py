"""Lesson pages rendered once, served fast; conditional GETs (ETag / 304) for personalised HTML.

**What is cached.** A lesson page's shared part (markdown, Pygments, the whole article, the
course navigation, hreflang links, every translated UI string) is rendered once per
(lesson, locale) and kept as the pieces between its *slots* (`app/page_slots.py`), together
with the few variants a slot can take that do not depend on who asks: the anonymous header
(per locale) and each quiz's outcome ("correct", "wrong", none).

**What is per request.** Serving a page joins the pieces with this request's values: the CSRF
token (meta tag and every form's hidden field), the CSP nonce (fresh per response), the header's
account corner (signed in: rendered per request, it names the user and carries a logout form),
the quiz outcome (`?quiz=`). Progress is not in the page: `static/js/progress.js` loads and
reports it through the API.

**Invalidation.** Entries belong to one `Content` object (the content store's current version):
when the store hot-reloads an edit it hands out a new object, and the first request that sees it
drops every entry. Templates are code: a template edit needs a restart.

**ETag.** A weak ETag over what the page is built from: the shared part's digest (content,
locale, lesson, templates), the CSRF token (so the learner), the account corner (so the user)
and the quiz outcome. Not the nonce: a 304 has no body, the browser keeps the stored page *and*
its stored Content-Security-Policy header (a 304 carries none: the security headers middleware
puts CSP only on text/html responses), whose nonce is the one in that page. The digest is the
same in every process that renders the same content, so several server processes agree.
`Cache-Control: private, no-cache`: browsers keep the page and revalidate every time; shared
caches do not store it.
"""

import hashlib
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from html import escape

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from app.accounts.auth import SESSION_COOKIE
from app.discovery import base_url, lesson_links
from app.http_cache import if_none_match
from app.i18n import translations
from app.page_slots import CSP_NONCE, CSRF_TOKEN, SLOTS, marker, split
from app.rendering import reading_minutes
from app.security.csrf import token_for
from app.templating import templates
from gradlab.content.loader import Content, lesson_view

PRIVATE_HTML = "private, no-cache"
ACCOUNT_NAV = "account_nav"
BASE_URL = "base_url"  # the site's address (app/discovery.py base_url), HTML-escaped
ANONYMOUS = "anonymous"
QUIZ_OUTCOME = "quiz_outcome:"
QUIZ_OUTCOMES = ("correct", "wrong")


@dataclass(frozen=True)
class CachedPage:
    parts: tuple[str, ...]  # split(): HTML, slot name, HTML, slot name, ..., HTML
    variants: Mapping[str, Mapping[str, str]]  # slot -> variant -> HTML
    digest: str  # of everything above: changes with content, locale, lesson, templates

    def assemble(self, values: Mapping[str, str]) -> str:
        pieces = list(self.parts)
        for index in range(1, len(pieces), 2):
            pieces[index] = values[pieces[index]]
        return "".join(pieces)


def _digest(parts: tuple[str, ...], variants: Mapping[str, Mapping[str, str]]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    for name in sorted(variants):
        for key in sorted(variants[name]):
            h.update(f"\1{name}\1{key}\1{variants[name][key]}".encode())
    return h.hexdigest()


class PageCache:
    """Rendered pages of one content version; `renders` counts the renders (tests read it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # fills run in worker threads (and several event loops)
        self._content: Content | None = None
        self._pages: dict[Hashable, CachedPage] = {}
        self.renders = 0

    def get(self, content: Content, key: Hashable) -> CachedPage | None:
        """The cached page, or None (not rendered yet, or rendered from older content)."""
        if content is not self._content:
            return None
        return self._pages.get(key)

    def fill(self, content: Content, key: Hashable, render: Callable[[], CachedPage]) -> CachedPage:
        """Render once (blocking: call it in a worker thread): concurrent misses wait here for
        the first one's render instead of rendering again."""
        with self._lock:
            if content is not self._content:  # new content: every older page is stale
                self._pages.clear()
                self._content = content
            page = self._pages.get(key)
            if page is None:
                page = render()
                self.renders += 1
                self._pages[key] = page
            return page


def render_lesson(content: Content, *, lesson: str, locale: str) -> CachedPage:
    """The shared part of /{locale}/lessons/{lesson}, with its slot variants."""
    view = lesson_view(content, lesson, locale)
    catalog = translations(locale)
    html = templates.env.get_template("lesson.html").render(
        {
            SLOTS: True,  # no `request` here: nothing per-request can slip into the cache
            "locale": locale,
            "translations": catalog,
            "view": view,
            "minutes": reading_minutes(view),
            "course_lessons": content.lesson_list(locale),
            "quiz_outcome": None,
            "path": lambda loc: f"/{loc}/lessons/{lesson}",
            # the site's address is the request's when not configured: a slot, so that no Host
            # header a client makes up can add a page to the cache
            "links": lesson_links(content, lesson=lesson, locale=locale, base_url=marker(BASE_URL)),
        }
    )
    variants: dict[str, dict[str, str]] = {
        ACCOUNT_NAV: {
            ANONYMOUS: templates.env.get_template("_account_nav.html").render(
                {"locale": locale, "translations": catalog}  # no request: nobody signed in
            )
        }
    }
    outcome_template = templates.env.get_template("_quiz_outcome.html")
    for section in view.sections:
        if section.spec.kind == "quiz":
            variants[QUIZ_OUTCOME + section.spec.id] = {"": ""} | {
                outcome: outcome_template.render(
                    {
                        "locale": locale,
                        "translations": catalog,
                        "section": section,
                        "quiz_outcome": outcome,
                    }
                )
                for outcome in QUIZ_OUTCOMES
            }
    parts = tuple(split(html))
    return CachedPage(parts=parts, variants=variants, digest=_digest(parts, variants))


def _maybe_signed_in(request: Request) -> bool:
    return "authorization" in request.headers or SESSION_COOKIE in request.cookies


def _account_nav(request: Request, locale: str) -> str:
    """The header's account corner for whoever is signed in (a database lookup)."""
    return templates.env.get_template("_account_nav.html").render(
        {"request": request, "locale": locale, "translations": translations(locale)}
    )


def weak_etag(*parts: str | bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return f'W/"{h.hexdigest()}"'


def matches(request: Request, etag: str) -> bool:
    """`If-None-Match` names `etag` (weak comparison, RFC 9110 13.1.2) or is `*`."""
    return if_none_match(request.headers.get("if-none-match"), etag)


def not_modified(etag: str) -> Response:
    """304: no body, no content type (so no CSP: the browser keeps the stored page's)."""
    return Response(status_code=304, headers={"ETag": etag, "Cache-Control": PRIVATE_HTML})


def conditional(request: Request, response: Response) -> Response:
    """ETag from a rendered body (pages not served from the cache, such as the course page,
    whose body carries no nonce); 304 when the browser has it."""
    etag = weak_etag(bytes(response.body))
    if matches(request, etag):
        reply = not_modified(etag)
        for value in response.headers.getlist("set-cookie"):
            reply.headers.append("set-cookie", value)
        return reply
    response.headers["ETag"] = etag
    response.headers["Cache-Control"] = PRIVATE_HTML
    return response


async def lesson_response(
    request: Request, *, content: Content, lesson: str, locale: str, quiz: str | None
) -> Response:
    """/{locale}/lessons/{lesson} for this request: the cached shared part + its slots."""
    cache: PageCache = request.app.state.page_cache
    key = ("lesson", lesson, locale)
    page = cache.get(content, key)
    if page is None:

        def render() -> CachedPage:
            return render_lesson(content, lesson=lesson, locale=locale)

        page = await run_in_threadpool(cache.fill, content, key, render)
    csrf = token_for(request)
    if _maybe_signed_in(request):
        # a database lookup: inside a slot, like every request's session (app/admission.py)
        async with request.app.state.db_gate.admit():
            nav = await run_in_threadpool(_account_nav, request, locale)
    else:
        nav = page.variants[ACCOUNT_NAV][ANONYMOUS]
    outcome = quiz if quiz in QUIZ_OUTCOMES else ""
    site = escape(base_url(request))
    etag = page_etag(page, csrf=csrf, nav=nav, outcome=outcome, site=site)
    if matches(request, etag):
        return not_modified(etag)
    values = slot_values(
        page, csrf=csrf, nonce=request.state.csp_nonce, nav=nav, outcome=outcome, site=site
    )
    return HTMLResponse(
        page.assemble(values), headers={"ETag": etag, "Cache-Control": PRIVATE_HTML}
    )


def page_etag(page: CachedPage, *, csrf: str, nav: str, outcome: str, site: str) -> str:
    """The page's ETag for this learner (see the module's docstring: not the nonce)."""
    return weak_etag(page.digest, csrf, nav, outcome, site)


def slot_values(
    page: CachedPage, *, csrf: str, nonce: str, nav: str, outcome: str, site: str
) -> dict[str, str]:
    """Every slot of `page` filled for one response."""
    values = {CSRF_TOKEN: csrf, CSP_NONCE: nonce, ACCOUNT_NAV: nav, BASE_URL: site}
    for name, choices in page.variants.items():
        if name.startswith(QUIZ_OUTCOME):
            values[name] = choices[outcome]
    return values
