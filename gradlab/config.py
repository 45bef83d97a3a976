"""Settings from the environment (prefix GRADLAB_), shared by every command."""

import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOCALES: tuple[str, ...] = ("en", "es", "de", "tr")
DEFAULT_LOCALE = "en"
METRICS_TOKEN_MIN_CHARS = 16  # shorter bearer tokens are guessable
RESERVED_CONNECTIONS = 2  # of each process's pool, for the polls of `?wait` requests


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GRADLAB_", extra="ignore")

    data_dir: Path = Path("data")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite file in data_dir"
    )
    secret_key: str | None = Field(
        default=None, description="signs cookies; default: a random key kept in data_dir"
    )
    public_base_url: str | None = Field(
        default=None,
        description="the site's address for canonical links, the sitemap and trusted origins "
        "(e.g. https://learn.example.org); unset: each request's own scheme and Host",
    )
    content_dir: Path = PROJECT_ROOT / "lessons"
    content_reload_s: float = Field(
        default=1.0, description="look for edited content at most this often; 0: never"
    )

    # accounts and abuse limits (app/accounts, app/security)
    auth_token_days: float = Field(
        default=30.0, gt=0, description="lifetime of a login: bearer token and session cookie"
    )
    login_rate_limit: int = Field(
        default=10,
        ge=1,
        description="login attempts per window per (client IP, email); register: per IP",
    )
    login_ip_rate_limit: int = Field(
        default=30, ge=1, description="login attempts per window per client IP, all emails"
    )
    login_email_rate_limit: int = Field(
        default=100,
        ge=1,
        description="login attempts per login_email_window_s per email, all addresses together",
    )
    login_email_window_s: float = Field(
        default=3600.0, gt=0, description="the window of login_email_rate_limit"
    )
    forwarded_allow_ips: str = Field(
        default="",
        description="proxies whose X-Forwarded-For/-Proto `gradlab serve` trusts (comma-separated"
        " IPs or networks, `*`: any); empty: none, the peer address is the client's",
    )
    submission_rate_limit: int = Field(
        default=30, ge=1, description="submissions per window per owner (learner or account)"
    )
    rate_window_s: float = Field(default=60.0, gt=0, description="the rate limits' window")

    # grader API (gradlab/tokens.py, gradlab/webhooks.py, app/routes/submissions.py)
    grader_rate_limit: int = Field(
        default=600, ge=1, description="submissions per window per grader token (batch items count)"
    )
    idempotency_ttl_s: float = Field(
        default=24 * 3600.0, gt=0, description="how long an Idempotency-Key is remembered"
    )
    webhook_allow_private: bool = Field(
        default=False,
        description="let callback_url reach loopback/private/link-local addresses (tests, LANs)",
    )
    webhook_dispatch: bool = Field(
        default=True, description="each worker process runs a webhook dispatcher thread"
    )
    webhook_timeout_s: float = Field(default=10.0, gt=0, description="one delivery attempt")
    webhook_max_attempts: int = Field(default=8, ge=1, description="then the delivery fails")
    webhook_backoff_s: float = Field(
        default=10.0, gt=0, description="wait before the 2nd attempt; doubles after each failure"
    )
    webhook_backoff_max_s: float = Field(default=3600.0, gt=0, description="cap of that wait")
    webhook_lease_s: float = Field(default=60.0, gt=0, description="a dispatcher's row lease")
    webhook_poll_s: float = Field(default=1.0, gt=0, description="dispatcher's idle poll")

    # queue
    lease_s: float = 30.0
    max_attempts: int = 3
    poll_interval_s: float = Field(
        default=0.05,
        gt=0,
        description="an idle worker's look at the queue (a read; SQLite's write lock only when "
        "a job is there), and a waiting request's look at its submission",
    )

    # operations (gradlab/logs.py, gradlab/heartbeat.py, app/routes/ops.py)
    log_format: Literal["text", "json"] = Field(
        default="text", description="log lines: text (key=value fields) or one JSON object each"
    )
    heartbeat_s: float = Field(
        default=5.0, gt=0, description="a worker writes its worker_heartbeat row this often"
    )
    heartbeat_retention_s: float = Field(
        default=3600.0, gt=0, description="heartbeat rows not written for this long are deleted"
    )
    metrics_token: str | None = Field(
        default=None,
        description="if set (16+ characters), GET /metrics needs `Authorization: Bearer <token>`;"
        " unset or blank: /metrics answers loopback clients only",
    )

    @field_validator("metrics_token")
    @classmethod
    def _check_metrics_token(cls, value: str | None) -> str | None:
        """Blank means "not set"; a short or unsendable token is a configuration error."""
        token = (value or "").strip()
        if not token:
            # compose passes "" for an unset variable: it must not become the token that
            # `Authorization: Bearer ` (nothing after the space) matches
            return None
        if len(token) < METRICS_TOKEN_MIN_CHARS:
            raise ValueError(
                f"GRADLAB_METRICS_TOKEN must be at least {METRICS_TOKEN_MIN_CHARS} characters"
                " (e.g. `openssl rand -hex 32`); unset it to serve /metrics to loopback only"
            )
        if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
            # a header carries it: anything else could never match what a scraper sends
            raise ValueError("GRADLAB_METRICS_TOKEN must be printable ASCII without spaces")
        return token

    # worker and sandbox
    device: Literal["auto", "cpu", "cuda"] = "auto"
    bwrap_path: str = "bwrap"
    sandbox_host_uid: int | None = Field(
        default=65534, description="unprivileged host uid bwrap runs as when the worker is root"
    )
    max_wall_s: float | None = Field(
        default=None, description="operator cap on every job's wall clock (lesson limits apply)"
    )
    sandbox: Literal["pool", "cold"] = Field(
        default="pool", description="warm pool of forking sandboxes, or one fresh one per job"
    )
    pool_slots: int = Field(default=1, ge=1, description="sandbox slots per worker process")
    gpu_ids: list[int] | None = Field(
        default=None, description="CUDA devices (PCI bus order) for the pool's slots, round robin"
    )
    gpu_memory_mb: int = Field(default=16384, description="GPU memory budget of one job (NVML)")
    job_nice: int = Field(
        default=0,
        ge=0,
        le=19,
        description="niceness of the sandboxes (e.g. 10 where workers share a host with the web)",
    )
    slot_memory_mb: int = Field(default=8192, description="RLIMIT_DATA of a pool slot's zygote")
    max_processes: int = Field(default=128, description="processes + threads of one job")
    max_code_bytes: int = 64 * 1024
    # overload (app/admission.py): bounded work per web process, answered 503 past it
    db_pool_size: int = Field(default=6, ge=1, description="database connections per process")
    db_max_overflow: int = Field(default=4, ge=0, description="connections past db_pool_size")
    db_lock_wait_s: float = Field(
        default=1.0,
        gt=0,
        description="SQLite: a web request's longest wait for the write lock before its 503",
    )
    admission_wait_s: float = Field(
        default=0.5, gt=0, description="a request's wait for a database slot before its 503"
    )
    max_waiting_requests: int = Field(
        default=200, ge=0, description="`?wait` requests held at once; past it, answered at once"
    )
    # submissions waiting to be graded (app/submissions/service.py: 503 / 429 past them)
    max_queued_jobs: int = Field(default=2000, ge=1, description="the whole queue's depth")
    max_queue_wait_s: float = Field(
        default=20.0,
        gt=0,
        description="a new job's estimated wait for a worker (queued jobs x the last jobs' mean "
        "time / live workers); past it, 503",
    )
    max_pending_per_learner: int = Field(
        default=5, ge=1, description="waiting submissions of one account or anonymous learner"
    )
    max_pending_per_grader: int = Field(
        default=1000, ge=1, description="waiting submissions of one grader token"
    )
    max_pending_per_address: int = Field(
        default=20, ge=1, description="waiting submissions of learners at one client address"
    )
    # worker time of recent submissions (app/submissions/capacity.py: 429 past them)
    worker_time_window_s: float = Field(
        default=600.0, gt=0, description="the window of the worker-time budgets below"
    )
    worker_seconds_per_learner: float = Field(
        default=180.0, gt=0, description="worker seconds per window of one account or learner"
    )
    worker_seconds_per_address: float = Field(
        default=600.0, gt=0, description="worker seconds per window of learners at one address"
    )
    worker_seconds_per_grader: float = Field(
        default=7200.0, gt=0, description="worker seconds per window of one grader token"
    )
    draft_rate_limit: int = Field(
        default=120, ge=1, description="draft saves per rate_window_s per client address"
    )
    # /healthz (app/health.py)
    expect_workers: bool = Field(
        default=False, description="/healthz fails without a live worker (serve with workers: on)"
    )
    min_free_disk_mb: int = Field(default=64, ge=0, description="/healthz: free space in data_dir")
    max_body_bytes: int = Field(
        default=1024 * 1024, description="a request body's cap (413 past it), batches aside"
    )
    max_batch_body_bytes: int = Field(
        default=16 * 1024 * 1024, description="the cap of POST /api/v1/submissions/batch"
    )
    max_output_bytes: int = 64 * 1024
    max_observation_bytes: int = 64 * 1024 * 1024

    def uvicorn_proxy_options(self) -> dict[str, object]:
        """uvicorn's forwarded-header options. Its own default trusts X-Forwarded-For from
        loopback, which lets anything on the host that forwards blindly pick the client IP
        the rate limits count; here nothing is trusted unless `forwarded_allow_ips` is set."""
        parts = (part.strip() for part in self.forwarded_allow_ips.split(","))
        allowed = ",".join(part for part in parts if part)
        if not allowed:
            return {"proxy_headers": False}
        return {"proxy_headers": True, "forwarded_allow_ips": allowed}

    def learner_wall_s(self, exercise_wall_s: float) -> float:
        """The learner's wall clock for an exercise: its lesson's limit, capped by max_wall_s."""
        return min(exercise_wall_s, self.max_wall_s or exercise_wall_s)

    @property
    def secure_cookies(self) -> bool:
        """Cookies only over HTTPS: when the configured address is an https one."""
        return (self.public_base_url or "").startswith("https://")

    @property
    def db_request_slots(self) -> int:
        """Requests that may hold a session at once: every connection but the RESERVED ones,
        which the short polls of `?wait` requests use (app/admission.py)."""
        return max(1, self.db_pool_size + self.db_max_overflow - RESERVED_CONNECTIONS)

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'gradlab.db').resolve()}"

    def resolved_secret_key(self) -> str:
        """The configured key, or one generated once and kept (mode 0600) in data_dir."""
        if self.secret_key:
            return self.secret_key
        path = self.data_dir / "secret_key"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_text(encoding="ascii").strip()
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_urlsafe(48))
        return path.read_text(encoding="ascii").strip()


@lru_cache
def get_settings() -> Settings:
    return Settings()
