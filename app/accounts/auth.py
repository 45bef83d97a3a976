"""Who is asking: an app's bearer token, a browser's session cookie, or nobody (anonymous).

A request with an `Authorization` header is judged by that header alone (a bad token is 401,
never a fallback to cookies). The session cookie carries the same kind of token as the bearer
one, signed (itsdangerous) and HttpOnly, SameSite=Lax, Secure on an https site; a stale or
forged cookie simply means anonymous.
"""

from dataclasses import dataclass
from typing import Literal

from fastapi import HTTPException, Request, Response
from itsdangerous import BadSignature, URLSafeSerializer
from jinja2 import Environment, pass_context
from jinja2.runtime import Context
from sqlmodel import Session

from app.accounts import service
from app.accounts.schemas import UserPublic
from gradlab import tokens
from gradlab.config import Settings

SESSION_COOKIE = "gradlab_session"


@dataclass(frozen=True)
class Auth:
    user: UserPublic | None = None
    token_id: int | None = None  # the account login (AuthToken) behind `user`
    via: Literal["bearer", "cookie"] | None = None
    grader_id: int | None = None  # a grader token (gradlab/tokens.py): never with `user`

    def owner(self, learner_id: str) -> str:
        """Who owns what this request reads and makes."""
        if self.grader_id is not None:
            return tokens.owner_of(self.grader_id)
        return f"user:{self.user.id}" if self.user else f"learner:{learner_id}"


ANONYMOUS = Auth()


def _serializer(settings: Settings) -> URLSafeSerializer:
    return URLSafeSerializer(settings.resolved_secret_key(), salt="session")


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status_code=401, detail=detail, headers={"WWW-Authenticate": 'Bearer realm="gradlab"'}
    )


def resolve(request: Request, session: Session) -> Auth:
    """The request's Auth, computed once per request (cached on request.state)."""
    cached = getattr(request.state, "auth", None)
    if isinstance(cached, Auth):
        return cached
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise unauthorized("use `Authorization: Bearer <token>`")
        if credentials.strip().startswith(tokens.PREFIX):  # a grader token, never an account's
            grader = tokens.lookup(session=session, token=credentials.strip())
            if grader is None:
                raise unauthorized("invalid or revoked grader token")
            auth = Auth(grader_id=grader.id, via="bearer")
        else:
            found = service.user_for_token(session=session, token=credentials.strip())
            if found is None:
                raise unauthorized("invalid, expired or revoked token")
            auth = Auth(user=found[0], token_id=found[1], via="bearer")
    else:
        auth = ANONYMOUS
        raw = request.cookies.get(SESSION_COOKIE)
        if raw:
            try:
                token = str(_serializer(request.app.state.settings).loads(raw))
            except BadSignature:
                token = None
            found = service.user_for_token(session=session, token=token) if token else None
            if found is not None:
                auth = Auth(user=found[0], token_id=found[1], via="cookie")
    request.state.auth = auth
    return auth


def resolve_for_template(request: Request) -> UserPublic | None:
    """The signed-in user for the page header; never raises."""
    try:
        with Session(request.app.state.engine) as session:
            return resolve(request, session).user
    except HTTPException:
        return None


def set_session_cookie(response: Response, *, token: str, settings: Settings) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        _serializer(settings).dumps(token),
        max_age=int(settings.auth_token_days * 24 * 3600),
        httponly=True,
        samesite="lax",
        secure=settings.secure_cookies,
        path="/",
    )


def clear_session_cookie(response: Response, *, settings: Settings) -> None:
    response.delete_cookie(
        SESSION_COOKIE,
        path="/",
        httponly=True,
        samesite="lax",
        secure=settings.secure_cookies,
    )


def install_template_globals(env: Environment) -> None:
    """`current_user()` for every template: the signed-in account or None."""

    @pass_context
    def current_user(context: Context) -> UserPublic | None:
        request = context.get("request")  # absent only when a template is rendered bare
        return resolve_for_template(request) if request is not None else None

    env.globals.update(current_user=current_user)
