"""Anonymous learner identity: a random id in a signed, HttpOnly, SameSite=Lax cookie.

Anyone may read lessons and try exercises without an account; the id scopes their submissions
so that nobody else can read them. Accounts (which adopt this id's work) come later.
"""

import secrets

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response

COOKIE = "gradlab_learner"
ONE_YEAR_S = 365 * 24 * 3600


class LearnerCookieMiddleware(BaseHTTPMiddleware):
    def __init__(self, app, *, secret_key: str, secure: bool) -> None:  # type: ignore[no-untyped-def]
        super().__init__(app)
        self.serializer = URLSafeSerializer(secret_key, salt="learner")
        self.secure = secure

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        learner_id, fresh = None, False
        raw = request.cookies.get(COOKIE)
        if raw:
            try:
                learner_id = str(self.serializer.loads(raw))
            except BadSignature:
                learner_id = None
        if learner_id is None:
            learner_id, fresh = secrets.token_urlsafe(18), True
        request.state.learner_id = learner_id
        response = await call_next(request)
        if fresh:
            response.set_cookie(
                COOKIE,
                self.serializer.dumps(learner_id),
                max_age=ONE_YEAR_S,
                httponly=True,
                samesite="lax",
                secure=self.secure,
            )
        return response
