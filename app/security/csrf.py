"""CSRF protection.

Forms (every POST outside /api/: quick check, exercise, login, register, logout) carry a
per-session token in the hidden field `csrf_token` (or, for a script that posts the form with
fetch, the `X-CSRF-Token` header). The token is an HMAC of the learner cookie's id under the
site's secret key: stateless, the same for every page of one browser session, and useless with
any other learner cookie. Pages read it with `{{ csrf_token() }}` / `{{ csrf_field() }}`;
`base.html` puts it in `<meta name="csrf-token">` for scripts.

JSON API writes are checked by `CrossSiteApiGuard`:
- with an `Authorization` header (apps, graders) there is nothing to forge: browsers never add
  one to a cross-site request, and such requests never fall back to cookies (app/accounts);
- authenticated by cookies, a write is refused (403) when the browser says it is cross-site:
  `Sec-Fetch-Site` other than `same-origin`/`none`, or else an `Origin` that is not this site.
  A valid `X-CSRF-Token` header is accepted in any case. Requests with neither header do not
  come from a browser page (curl, test clients, server-to-server), so they cannot be forged in
  a victim's browser; and the API only parses JSON bodies, which a cross-site HTML form cannot
  send.
"""

import base64
import hashlib
import hmac
from collections.abc import Iterable
from urllib.parse import urlsplit

from fastapi import Request
from jinja2 import Environment, pass_context
from jinja2.runtime import Context
from markupsafe import Markup
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.security.exceptions import CsrfFailed

FIELD = "csrf_token"
HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class CsrfTokens:
    def __init__(self, secret_key: str) -> None:
        self._key = hashlib.sha256(b"gradlab-csrf:" + secret_key.encode()).digest()

    def for_learner(self, learner_id: str) -> str:
        digest = hmac.new(self._key, learner_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def valid(self, learner_id: str | None, candidate: str | None) -> bool:
        if not learner_id or not candidate:
            return False
        return hmac.compare_digest(self.for_learner(learner_id), candidate)


def token_for(request: Request) -> str:
    return request.app.state.csrf.for_learner(request.state.learner_id)


def _learner_id(scope: Scope) -> str | None:
    state = scope.get("state") or {}
    return state.get("learner_id")


async def require_form_token(request: Request) -> None:
    """Router dependency of the HTML pages: every unsafe request carries the token."""
    if request.method in SAFE_METHODS:
        return
    candidate = request.headers.get(HEADER)
    if not candidate and request.headers.get("content-type", "").startswith(FORM_TYPES):
        value = (await request.form()).get(FIELD)
        candidate = value if isinstance(value, str) else None
    if not request.app.state.csrf.valid(request.state.learner_id, candidate):
        raise CsrfFailed


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class CrossSiteApiGuard:
    """ASGI middleware: refuses cross-site, cookie-authenticated writes to /api/ (see above).
    It must run inside LearnerCookieMiddleware (added before it), which sets the learner id."""

    def __init__(self, app: ASGIApp, *, trusted_origins: Iterable[str], tokens: CsrfTokens):
        self.app = app
        self.trusted = {_origin(o) for o in trusted_origins}
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] not in SAFE_METHODS
            and scope["path"].startswith("/api/")
            and self._forged(scope)
        ):
            response = JSONResponse(
                {"detail": "cross-site request refused: send the X-CSRF-Token header"},
                status_code=403,
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _forged(self, scope: Scope) -> bool:
        headers = Headers(scope=scope)
        if "authorization" in headers:
            return False
        if self.tokens.valid(_learner_id(scope), headers.get(HEADER)):
            return False
        fetch_site = headers.get("sec-fetch-site")
        if fetch_site is not None:
            return fetch_site not in ("same-origin", "none")
        origin = headers.get("origin")
        if origin is None:
            return False
        own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}".lower()
        return origin.lower() not in self.trusted | {own}


def install_template_globals(env: Environment) -> None:
    """`csrf_token()` and `csrf_field()` for every template (they read the render's request)."""

    @pass_context
    def csrf_token(context: Context) -> str:
        request = context.get("request")  # absent only when a template is rendered bare
        return token_for(request) if request is not None else ""

    @pass_context
    def csrf_field(context: Context) -> Markup:
        return Markup('<input type="hidden" name="{}" value="{}">').format(
            FIELD, csrf_token(context)
        )

    env.globals.update(csrf_token=csrf_token, csrf_field=csrf_field)
