"""What `/healthz` checks: each part it claims, by doing it.

- **database**: a write, not just `SELECT 1`: this process upserts its own `health_probe` row in
  a transaction bounded to `HEALTH_TIMEOUT_S`, so a read-only, full or locked database fails
  here, not first on a learner's submission;
- **database file** (SQLite): the path still names the file this process opened. A database
  deleted while running keeps taking writes into the deleted inode, and a new file at the path
  splits the processes between two databases; both are caught by the file's identity;
- **disk**: free space where the data lives, at least `min_free_disk_mb`;
- **workers** (when `expect_workers`): a worker heartbeat younger than three heartbeat periods.

Each check says what failed in words an operator can act on; `/healthz` answers 503 if any does.
"""

import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from gradlab.config import Settings

HEALTH_TIMEOUT_S = 1.0
PROBE_ID = f"{socket.gethostname()}:{os.getpid()}"[:200]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def sqlite_path(engine: Engine) -> Path | None:
    url = make_url(str(engine.url))
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def file_identity(path: Path | None) -> tuple[int, int] | None:
    """(device, inode) of the database file, or None (not SQLite, or no file yet)."""
    if path is None:
        return None
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def _write(engine: Engine) -> None:
    """Upsert this process's probe row within HEALTH_TIMEOUT_S (a lock does not hang /healthz).
    `engine` is the health checks' own (app.main): its connections wait for no request's."""
    millis = int(HEALTH_TIMEOUT_S * 1000)
    with engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            connection.exec_driver_sql(f"PRAGMA busy_timeout={millis}")
        else:
            connection.exec_driver_sql(f"SET statement_timeout = {millis}")
            connection.exec_driver_sql(f"SET lock_timeout = {millis}")
        connection.commit()
        with connection.begin():
            values = {"id": PROBE_ID, "at": time.time()}
            updated = connection.execute(
                text("UPDATE health_probe SET written_at = :at WHERE id = :id"), values
            )
            if updated.rowcount == 0:
                connection.execute(
                    text("INSERT INTO health_probe (id, written_at) VALUES (:id, :at)"), values
                )


def _error(exc: BaseException) -> str:
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
    return f"{type(exc).__name__}: {reason}"


def check_database(engine: Engine) -> Check:
    try:
        _write(engine)
    except Exception as exc:  # any driver error: the database cannot take a write
        return Check("database", False, f"cannot write: {_error(exc)}")
    return Check("database", True, "ok")


def check_database_file(engine: Engine, opened: tuple[int, int] | None) -> Check | None:
    path = sqlite_path(engine)
    if path is None:
        return None
    now = file_identity(path)
    if now is None:
        return Check("database_file", False, f"{path} is gone: deleted while the server runs")
    if opened is not None and now != opened:
        return Check(
            "database_file", False, f"{path} is another file than the one this server opened"
        )
    return Check("database_file", True, "ok")


def check_disk(settings: Settings) -> Check:
    where = settings.data_dir
    while not where.exists() and where != where.parent:  # on PostgreSQL it may never be made
        where = where.parent
    free_mb = shutil.disk_usage(where).free / 2**20
    if free_mb < settings.min_free_disk_mb:
        return Check(
            "disk",
            False,
            f"{free_mb:.0f} MiB free in {settings.data_dir}, under {settings.min_free_disk_mb}",
        )
    return Check("disk", True, f"{free_mb:.0f} MiB free")


def check_workers(engine: Engine, settings: Settings) -> Check | None:
    if not settings.expect_workers:
        return None
    horizon = time.time() - 3 * settings.heartbeat_s
    try:
        with engine.connect() as connection:
            live = connection.execute(
                text(
                    "SELECT COUNT(*) FROM worker_heartbeat "
                    "WHERE last_seen >= :horizon AND stopped_at IS NULL"
                ),
                {"horizon": horizon},
            ).scalar_one()
    except Exception as exc:
        return Check("workers", False, f"cannot read the heartbeats: {_error(exc)}")
    if live == 0:
        return Check(
            "workers", False, f"no live worker (no heartbeat in {3 * settings.heartbeat_s:g} s)"
        )
    return Check("workers", True, f"{live} live")


def run_checks(
    *, engine: Engine, settings: Settings, opened: tuple[int, int] | None
) -> list[Check]:
    checks = [
        check_database(engine),
        check_database_file(engine, opened),
        check_disk(settings),
        check_workers(engine, settings),
    ]
    return [check for check in checks if check is not None]
