"""The two refusals of app/security (a bad CSRF token, a rate limit), answered as a localized
page to a browser's form post, as JSON to the API and to a page's script that asks for JSON.

Their wording lives in `templates/_security_messages.html`, where `pybabel extract` finds it
(plural forms included) and where both the page and the JSON answer take it from.
"""

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from app.i18n import negotiate, translations
from app.security.exceptions import SecurityRejection
from app.templating import env, render
from gradlab.config import DEFAULT_LOCALE, LOCALES

LOCALE_COOKIE = "gradlab_locale"  # the cookie app.routes.pages remembers the locale in


def wording(exc: SecurityRejection, locale: str) -> tuple[str, str]:
    """(title, message) of a refusal in `locale`."""
    module = env.get_template("_security_messages.html").make_module(
        {"locale": locale, "translations": translations(locale)}
    )
    title = str(module.title(exc.kind))  # type: ignore[attr-defined]
    message = str(module.message(exc.kind, exc.retry_after))  # type: ignore[attr-defined]
    return " ".join(title.split()), " ".join(message.split())


def page_locale(request: Request) -> str:
    first = request.url.path.strip("/").split("/", 1)[0]
    if first in LOCALES:
        return first
    return negotiate(request.cookies.get(LOCALE_COOKIE), request.headers.get("accept-language"))


def busy_response(request: Request, retry_after: int, detail: str) -> Response:
    """503 with Retry-After: `detail` as JSON to the API and to scripts, a page otherwise."""
    headers = {"Retry-After": str(retry_after), "Cache-Control": "no-store"}
    if request.url.path.startswith("/api/") or "application/json" in request.headers.get(
        "accept", ""
    ):
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
    if api or "application/json" in request.headers.get("accept", ""):
        return JSONResponse({"detail": message}, status_code=exc.status_code, headers=headers)
    response = render(
        request,
        "error.html",
        locale=locale,
        status_code=exc.status_code,
        title=title,
        message=message,
        path=lambda loc: f"/{loc}/",
    )
    response.headers.update(headers)
    response.headers["Cache-Control"] = "no-store"
    return response
