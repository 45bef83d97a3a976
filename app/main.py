"""The FastAPI application factory."""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.access_log import AccessLogMiddleware
from app.admission import Counter, Gate, Overloaded
from app.cached_lessons import CachedLessonsMiddleware
from app.compression import RenderedGZipMiddleware
from app.health import file_identity, sqlite_path
from app.http_head import HeadAsGetMiddleware
from app.i18n import check_catalogs, negotiate
from app.learner import LearnerCookieMiddleware
from app.page_cache import PageCache
from app.routes import api, api_docs, auth, authoring, discovery, insights, ops, pages, progress
from app.routes import submissions as submissions_api
from app.security.body_limit import BodyLimitMiddleware
from app.security.csrf import CrossSiteApiGuard, CsrfTokens
from app.security.errors import busy_response, security_error
from app.security.exceptions import SecurityRejection
from app.security.ratelimit import DatabaseRateLimiter
from app.security_headers import SecurityHeadersMiddleware
from app.static_files import SITE_ASSETS
from app.templating import render
from gradlab.config import LOCALES, Settings, get_settings
from gradlab.content.store import ContentStore
from gradlab.db import init_db, make_engine

BODY_PARSE_ERROR = "There was an error parsing the body"  # fastapi.routing's 400 detail
DATABASE_RETRY_S = 5
log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    check_catalogs()  # the .mo files are built by scripts/bootstrap.sh: fail now, not per page

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        app.state.engine.dispose()
        app.state.health_engine.dispose()
        app.state.limiter_engine.dispose()

    app = FastAPI(
        title="gradlab",
        version="0.1.0",
        description=(
            "Interactive lessons on training neural networks fast, graded in a sandbox on a GPU "
            "where the server has one, else on the CPU."
        ),
        lifespan=lifespan,
        docs_url=None,  # app/routes/api_docs.py serves /docs from the site's own files
        redoc_url=None,
    )
    app.state.settings = settings
    if not settings.public_base_url:
        log.warning(
            "GRADLAB_PUBLIC_BASE_URL is not set: canonical links, the sitemap and robots.txt "
            "name each request's own host; set it to the site's public address"
        )
    app.state.engine = make_engine(settings, lock_wait_s=settings.db_lock_wait_s)
    init_db(app.state.engine)
    # /healthz's own connection: it never waits behind the requests' (app/health.py)
    app.state.health_engine = make_engine(settings, pool_size=1, overflow=0)
    app.state.database_identity = file_identity(sqlite_path(app.state.engine))
    app.state.db_gate = Gate(settings.db_request_slots, wait_s=settings.admission_wait_s)
    app.state.waiting = Counter(settings.max_waiting_requests)
    app.state.content_store = ContentStore(
        settings.content_dir, check_interval_s=settings.content_reload_s
    )
    app.state.csrf = CsrfTokens(settings.resolved_secret_key())
    app.state.page_cache = PageCache()  # lesson pages rendered once per content version
    # the rate limits' counts, shared by every web process, on connections of their own: a
    # hit is a few milliseconds' transaction that must not commit the request's session
    app.state.limiter_engine = make_engine(
        settings, pool_size=2, overflow=2, lock_wait_s=settings.db_lock_wait_s
    )
    app.state.rate_limiter = DatabaseRateLimiter(app.state.limiter_engine)
    # inside the learner cookie middleware (added after it), which sets the learner id
    app.add_middleware(
        CrossSiteApiGuard,
        trusted_origins=[settings.public_base_url] if settings.public_base_url else [],
        tokens=app.state.csrf,
    )
    app.add_middleware(
        LearnerCookieMiddleware,
        secret_key=settings.resolved_secret_key(),
        secure=settings.secure_cookies,
    )
    app.add_middleware(
        BodyLimitMiddleware,
        cap=settings.max_body_bytes,
        caps={submissions_api.BATCH_PATH: settings.max_batch_body_bytes},
    )
    # what the app renders, gzipped per response (static files are gzipped once, ahead)
    app.add_middleware(RenderedGZipMiddleware, precompressed=("/static/", api_docs.ASSETS))
    app.add_middleware(HeadAsGetMiddleware)
    app.add_middleware(SecurityHeadersMiddleware)  # covers every response
    # cached lesson pages for returning visitors, before the router (and the layers above)
    app.add_middleware(
        CachedLessonsMiddleware,
        content_store=app.state.content_store,
        page_cache=app.state.page_cache,
        secret_key=settings.resolved_secret_key(),
        csrf=app.state.csrf,
        public_base_url=settings.public_base_url,
    )
    app.add_middleware(AccessLogMiddleware)  # outermost: times every response
    app.mount("/static", SITE_ASSETS, name="static")  # fingerprinted, gzipped once
    app.mount(api_docs.ASSETS, api_docs.SWAGGER_UI, name="api-docs")
    app.include_router(api_docs.router)  # /docs
    app.include_router(ops.router)  # /healthz, /metrics
    app.include_router(submissions_api.router)  # /api/v1/submissions...
    app.include_router(api.router)
    app.include_router(auth.api_router)
    app.include_router(progress.router)
    app.include_router(auth.pages_router)
    app.include_router(authoring.router)
    app.include_router(insights.router)  # class insight: /api/v1/insights, /{locale}/insights
    app.include_router(discovery.router)
    app.include_router(pages.router)

    app.add_exception_handler(SecurityRejection, security_error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and exc.detail == BODY_PARSE_ERROR:
            # FastAPI's answer to a body that is not even UTF-8: malformed JSON is 422
            invalid = {"loc": ["body"], "msg": "the body is not valid JSON", "type": "json_invalid"}
            return JSONResponse({"detail": [invalid]}, status_code=422)
        if request.url.path.startswith("/api/") or exc.status_code != 404:
            return JSONResponse(
                {"detail": exc.detail},
                status_code=exc.status_code,
                headers=getattr(exc, "headers", None),
            )
        first = request.url.path.strip("/").split("/", 1)[0]
        locale = (
            first
            if first in LOCALES
            else negotiate(
                request.cookies.get(pages.LOCALE_COOKIE), request.headers.get("accept-language")
            )
        )
        return render(
            request, "404.html", locale=locale, status_code=404, path=lambda loc: f"/{loc}/"
        )

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, exc: Overloaded) -> Response:
        return busy_response(request, int(exc.headers["Retry-After"]), str(exc.detail))

    @app.exception_handler(SQLAlchemyTimeoutError)
    @app.exception_handler(OperationalError)
    async def database_unavailable(request: Request, exc: Exception) -> Response:
        # No connection in time, a lock held too long, a database that went away: the request
        # did not happen, and a retry may succeed. Logged for the operator; /healthz says more.
        log.warning("database unavailable for %s: %s", request.url.path, exc)
        return busy_response(request, DATABASE_RETRY_S, "the database is busy or unavailable")

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = [{"loc": e["loc"], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return JSONResponse({"detail": errors}, status_code=422)

    return app
