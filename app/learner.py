"""Anonymous learner identity: a random id in a signed, HttpOnly, SameSite=Lax cookie.

Anyone may read lessons and try exercises without an account; the id scopes their submissions
so that nobody else can read them. Accounts (which adopt this id's work) come later.
"""

import secrets

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "gradlab_learner"
ONE_YEAR_S = 365 * 24 * 3600


class LearnerCookieMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware, which costs a task and a body stream per request):
    puts the learner id in the request state and sets the cookie on a new learner's response."""

    def __init__(self, app: ASGIApp, *, secret_key: str, secure: bool) -> None:
        self.app = app
        self.serializer = URLSafeSerializer(secret_key, salt="learner")
        self.secure = secure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        learner_id = None
        raw = HTTPConnection(scope).cookies.get(COOKIE)
        if raw:
            try:
                learner_id = str(self.serializer.loads(raw))
            except BadSignature:
                learner_id = None
        fresh = learner_id is None
        if learner_id is None:
            learner_id = secrets.token_urlsafe(18)
        scope.setdefault("state", {})["learner_id"] = learner_id
        if not fresh:
            await self.app(scope, receive, send)
            return
        cookie = self._cookie(learner_id)

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("set-cookie", cookie)
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _cookie(self, learner_id: str) -> str:
        """The Set-Cookie value, written by Starlette's own `set_cookie`."""
        response = Response()
        response.set_cookie(
            COOKIE,
            self.serializer.dumps(learner_id),
            max_age=ONE_YEAR_S,
            httponly=True,
            samesite="lax",
            secure=self.secure,
        )
        return response.headers["set-cookie"]
