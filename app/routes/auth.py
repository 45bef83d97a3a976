"""Accounts: the JSON API (`/api/v1/auth/...`, for the web and apps alike) and the pages
(`/{locale}/register`, `/{locale}/login`, `POST /{locale}/logout`)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Form, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlmodel import Session

from app.accounts import security, service
from app.accounts.adopt import adopt
from app.accounts.auth import clear_session_cookie, set_session_cookie
from app.accounts.schemas import Credentials, Token, UserPublic
from app.accounts.security import Problem
from app.accounts.service import AccountError
from app.client import client_address
from app.deps import AuthDep, CurrentUser, LocaleDep, SessionDep, SettingsDep
from app.security.csrf import require_form_token
from app.security.exceptions import RateLimited
from app.security.ratelimit import Limit, hit_in_order
from app.templating import render
from gradlab.config import Settings

api_router = APIRouter(prefix="/api/v1/auth", tags=["auth"])
pages_router = APIRouter(include_in_schema=False, dependencies=[Depends(require_form_token)])

STATUS = {Problem.email_taken: 409}


# --- shared steps ---------------------------------------------------------------------------


def login_limits(request: Request, settings: Settings, email: str) -> list[Limit]:
    """Narrowest first (app.security.ratelimit.hit_in_order): this address on this email, this
    address on any email, then this email from everywhere, slowly. An attacker's address is
    stopped by the first two long before it can fill the third, so the account's owner, from
    their own address, still gets in."""
    ip = client_address(request)
    return [
        Limit(f"login-ip-email:{ip}:{email}", settings.login_rate_limit, settings.rate_window_s),
        Limit(f"login-ip:{ip}", settings.login_ip_rate_limit, settings.rate_window_s),
        Limit(
            f"login-email:{email}", settings.login_email_rate_limit, settings.login_email_window_s
        ),
    ]


def register_limits(request: Request, settings: Settings) -> list[Limit]:
    ip = client_address(request)
    return [Limit(f"register-ip:{ip}", settings.login_rate_limit, settings.rate_window_s)]


def _limit(request: Request, limits: list[Limit]) -> None:
    """One attempt against the limits in turn; 429 at the first that is full."""
    wait = hit_in_order(request.app.state.rate_limiter, limits)
    if wait is not None:
        raise RateLimited(wait)


def _sign_in(
    request: Request, response: Response, *, session: Session, settings: Settings, user_id: str
) -> str:
    """A new login for the account: token row, session cookie, and the anonymous learner's
    work joins the account."""
    adopt(session=session, learner_id=request.state.learner_id, user_id=user_id)
    lifetime_s = settings.auth_token_days * 24 * 3600
    token = service.create_token(session=session, user_id=user_id, lifetime_s=lifetime_s)
    set_session_cookie(response, token=token, settings=settings)
    return token


def _safe_next(target: str | None, locale: str) -> str:
    """Only a path on this site (no scheme, no `//host`, no backslash tricks)."""
    if target and target.startswith("/") and not target.startswith(("//", "/\\")):
        return target
    return f"/{locale}/"


# --- API ------------------------------------------------------------------------------------


@api_router.post("/register", status_code=201, response_model=Token)
def api_register(
    data: Credentials,
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
) -> Token:
    """Create an account and sign in (same answer as login). 409: email taken; 422: email or
    password not acceptable (at least 8 characters, not only spaces, not the email address or
    its part before the @, not a common password)."""
    _limit(request, register_limits(request, settings))
    try:
        user = service.register(session=session, email=data.email, password=data.password)
    except AccountError as exc:
        raise HTTPException(STATUS.get(exc.problem, 422), detail=str(exc)) from None
    token = _sign_in(request, response, session=session, settings=settings, user_id=user.id)
    return Token(access_token=token)


@api_router.post("/login", response_model=Token)
def api_login(
    data: Credentials,
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
) -> Token:
    """`access_token` for `Authorization: Bearer`; also sets the browser session cookie."""
    email = security.normalize_email(data.email)
    _limit(request, login_limits(request, settings, email))
    user = service.authenticate(session=session, email=email, password=data.password)
    if user is None:
        raise HTTPException(401, detail="wrong email or password")
    token = _sign_in(request, response, session=session, settings=settings, user_id=user.id)
    return Token(access_token=token)


@api_router.post("/logout", status_code=204)
def api_logout(auth: AuthDep, session: SessionDep, settings: SettingsDep) -> Response:
    """Revoke the token this request used (bearer or cookie) and clear the cookie."""
    if auth.token_id is not None:
        service.revoke(session=session, token_id=auth.token_id)
    response = Response(status_code=204)
    clear_session_cookie(response, settings=settings)
    return response


@api_router.get("/me", response_model=UserPublic)
def api_me(user: CurrentUser) -> UserPublic:
    return user


# --- pages ----------------------------------------------------------------------------------


def _form_page(
    request: Request,
    name: str,
    *,
    locale: str,
    status_code: int = 200,
    email: str = "",
    error: str | None = None,
    next_url: str | None = None,
) -> HTMLResponse:
    response = render(
        request,
        name,
        locale=locale,
        status_code=status_code,
        email=email,
        error=error,
        next_url=next_url or "",
        path=lambda loc: f"/{loc}/{name.removesuffix('.html')}",
    )
    response.headers["Cache-Control"] = "no-store"
    return response


@pages_router.get("/{locale}/login", response_class=HTMLResponse)
def login_page(request: Request, locale: LocaleDep, next: str | None = None) -> Response:
    return _form_page(request, "login.html", locale=locale, next_url=next)


@pages_router.post("/{locale}/login", response_class=HTMLResponse)
def login_form(
    request: Request,
    locale: LocaleDep,
    email: Annotated[str, Form(max_length=security.MAX_EMAIL)],
    password: Annotated[str, Form(max_length=security.MAX_PASSWORD)],
    session: SessionDep,
    settings: SettingsDep,
    next: Annotated[str | None, Form()] = None,
) -> Response:
    normalized = security.normalize_email(email)
    try:
        _limit(request, login_limits(request, settings, normalized))
    except RateLimited as exc:
        page = _form_page(
            request, "login.html", locale=locale, status_code=429, email=email,
            error="rate_limited", next_url=next,
        )  # fmt: skip
        page.headers.update(exc.headers or {})
        return page
    user = service.authenticate(session=session, email=normalized, password=password)
    if user is None:
        return _form_page(
            request, "login.html", locale=locale, status_code=401, email=email,
            error="wrong_credentials", next_url=next,
        )  # fmt: skip
    response = RedirectResponse(_safe_next(next, locale), status_code=303)
    _sign_in(request, response, session=session, settings=settings, user_id=user.id)
    return response


@pages_router.get("/{locale}/register", response_class=HTMLResponse)
def register_page(request: Request, locale: LocaleDep) -> Response:
    return _form_page(request, "register.html", locale=locale)


@pages_router.post("/{locale}/register", response_class=HTMLResponse)
def register_form(
    request: Request,
    locale: LocaleDep,
    email: Annotated[str, Form(max_length=security.MAX_EMAIL)],
    password: Annotated[str, Form(max_length=security.MAX_PASSWORD)],
    session: SessionDep,
    settings: SettingsDep,
) -> Response:
    try:
        _limit(request, register_limits(request, settings))
    except RateLimited as exc:
        page = _form_page(
            request, "register.html", locale=locale, status_code=429, email=email,
            error="rate_limited",
        )  # fmt: skip
        page.headers.update(exc.headers or {})
        return page
    try:
        user = service.register(session=session, email=email, password=password)
    except AccountError as exc:
        return _form_page(
            request, "register.html", locale=locale, status_code=STATUS.get(exc.problem, 422),
            email=email, error=exc.problem.value,
        )  # fmt: skip
    response = RedirectResponse(f"/{locale}/", status_code=303)
    _sign_in(request, response, session=session, settings=settings, user_id=user.id)
    return response


@pages_router.post("/{locale}/logout")
def logout_form(
    locale: LocaleDep, auth: AuthDep, session: SessionDep, settings: SettingsDep
) -> Response:
    if auth.token_id is not None:
        service.revoke(session=session, token_id=auth.token_id)
    response = RedirectResponse(f"/{locale}/", status_code=303)
    clear_session_cookie(response, settings=settings)
    return response
