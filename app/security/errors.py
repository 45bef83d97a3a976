"""The two refusals of app/security (a bad CSRF token, a rate limit), answered as a localized
page to a browser's form post, as JSON to the API and to a page's script that asks for JSON.

Their wording lives in `templates/_security_messages.html`, where `pybabel extract` finds it
(plural forms included) and where both the page and the JSON answer take it from. The helpers
here (`wants_json`, `error_page`, `message_macros`, `busy_response`) answer the other refusals
of the site the same way (a refused submission, an overloaded server).
"""

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from app.i18n import negotiate, translations
from app.security.exceptions import SecurityRejection
from app.templating import env, render
from gradlab.config import DEFAULT_LOCALE, LOCALES

LOCALE_COOKIE = "gradlab_locale"  # the cookie app.routes.pages remembers the locale in


def message_macros(template: str, locale: str) -> Any:
    """The macros of a wording template (`title`, `message`), rendered in `locale`."""
    return env.get_template(template).make_module(
        {"locale": locale, "translations": translations(locale)}
    )


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def wording(exc: SecurityRejection, locale: str) -> tuple[str, str]:
    """(title, message) of a refusal in `locale`."""
    module = message_macros("_security_messages.html", locale)
    return one_line(module.title(exc.kind)), one_line(module.message(exc.kind, exc.retry_after))


def wants_json(request: Request) -> bool:
    """The API, and a page's script that asks for JSON; a browser's own navigation does not."""
    return request.url.path.startswith("/api/") or "application/json" in request.headers.get(
        "accept", ""
    )


def error_page(
    request: Request,
    *,
    locale: str,
    status_code: int,
    title: str,
    message: str,
    headers: dict[str, str] | None = None,
) -> Response:
    """error.html in `locale`, never cached."""
    response = render(
        request,
        "error.html",
        locale=locale,
        status_code=status_code,
        title=title,
        message=message,
        path=lambda loc: f"/{loc}/",
    )
    response.headers.update(headers or {})
    response.headers["Cache-Control"] = "no-store"
    return response


def page_locale(request: Request) -> str:
    first = request.url.path.strip("/").split("/", 1)[0]
    if first in LOCALES:
        return first
    return negotiate(request.cookies.get(LOCALE_COOKIE), request.headers.get("accept-language"))


def busy_response(request: Request, retry_after: int, detail: str) -> Response:
    """503 with Retry-After: `detail` as JSON to the API and to scripts, a page otherwise."""
    headers = {"Retry-After": str(retry_after), "Cache-Control": "no-store"}
    if wants_json(request):
        return JSONResponse({"detail": detail}, status_code=503, headers=headers)
    locale = page_locale(request)
    response = render(
        request,
        "busy.html",
        locale=locale,
        status_code=503,
        retry_after=retry_after,
        path=lambda loc: f"/{loc}/",
    )
    response.headers.update(headers)
    return response


async def security_error(request: Request, exc: Exception) -> Response:
    """Exception handler for SecurityRejection (registered in app.main)."""
    assert isinstance(exc, SecurityRejection)
    headers = dict(exc.headers or {})
    api = request.url.path.startswith("/api/")
    locale = DEFAULT_LOCALE if api else page_locale(request)
    title, message = wording(exc, locale)
    if wants_json(request):
        return JSONResponse({"detail": message}, status_code=exc.status_code, headers=headers)
    return error_page(
        request,
        locale=locale,
        status_code=exc.status_code,
        title=title,
        message=message,
        headers=headers,
    )
