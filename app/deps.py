"""Request dependencies: settings, database session, content, who is asking, rate limits.

Dependencies that only read request state are `async def`: FastAPI runs a plain `def` one on
the thread pool, a round trip through another thread for nothing. Those that touch the
database or the disk (`get_auth`, `get_content`'s reload check) stay `def`."""

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlmodel import Session

from app.accounts.auth import Auth, resolve, unauthorized
from app.accounts.schemas import UserPublic
from app.security.exceptions import RateLimited
from gradlab.config import LOCALES, Settings
from gradlab.content.loader import Content
from gradlab.content.store import ContentStore


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A session inside one of the process's database slots (app/admission.py: 503 when every
    slot stays taken for `admission_wait_s`). `request.state.db_slot` can give it back early."""
    async with request.app.state.db_gate.admit() as slot:
        request.state.db_slot = slot
        with Session(request.app.state.engine) as session:
            yield session


async def get_content_store(request: Request) -> ContentStore:
    return request.app.state.content_store


def get_content(request: Request) -> Content:
    """The current content (hot-reloaded when an author edits a file)."""
    return request.app.state.content_store.get()


def get_auth(request: Request, session: Annotated[Session, Depends(get_session)]) -> Auth:
    """Who is asking: a bearer token, the session cookie, or anonymous (401: bad bearer)."""
    return resolve(request, session)


async def get_owner(request: Request, auth: Annotated[Auth, Depends(get_auth)]) -> str:
    """Who owns what this request reads and creates: `user:<id>` when signed in, else
    `learner:<id>`, the anonymous learner behind the signed cookie."""
    return auth.owner(request.state.learner_id)


async def get_current_user(auth: Annotated[Auth, Depends(get_auth)]) -> UserPublic:
    if auth.grader_id is not None:
        raise HTTPException(status_code=403, detail="a grader token cannot use account endpoints")
    if auth.user is None:
        raise unauthorized("not signed in")
    return auth.user


async def require_grader(auth: Annotated[Auth, Depends(get_auth)]) -> int:
    """The grader token id; 401 without a bearer token, 403 for any other kind of login."""
    if auth.grader_id is not None:
        return auth.grader_id
    if auth.via != "bearer":
        raise unauthorized("this endpoint needs a grader token: `Authorization: Bearer glg_...`")
    raise HTTPException(status_code=403, detail="this endpoint needs a grader token")


def submission_limit(owner: str, settings: Settings) -> int:
    """Submissions per window: graders (CI, LMS) get `grader_rate_limit`, people less."""
    if owner.startswith("grader:"):
        return settings.grader_rate_limit
    return settings.submission_rate_limit


def enforce_limit(
    request: Request, key: str, *, limit: int, window_s: float, cost: int = 1
) -> None:
    """Count `cost` events for `key` on the app's rate limiter; 429 (RateLimited) when over."""
    retry_after = request.app.state.rate_limiter.hit(key, limit=limit, window_s=window_s, cost=cost)
    if retry_after is not None:
        raise RateLimited(retry_after)


def limit_submissions(
    request: Request,
    owner: Annotated[str, Depends(get_owner)],
    settings: Annotated[Settings, Depends(get_settings)],
) -> None:
    """Route dependency: at most `submission_rate_limit` submissions per window per owner."""
    enforce_limit(
        request,
        f"submit:{owner}",
        limit=submission_limit(owner, settings),
        window_s=settings.rate_window_s,
    )


async def valid_locale(locale: str) -> str:
    if locale not in LOCALES:
        raise HTTPException(status_code=404, detail=f"unknown locale {locale!r}")
    return locale


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
ContentDep = Annotated[Content, Depends(get_content)]
ContentStoreDep = Annotated[ContentStore, Depends(get_content_store)]
OwnerDep = Annotated[str, Depends(get_owner)]
AuthDep = Annotated[Auth, Depends(get_auth)]
CurrentUser = Annotated[UserPublic, Depends(get_current_user)]
GraderDep = Annotated[int, Depends(require_grader)]
LocaleDep = Annotated[str, Depends(valid_locale)]
