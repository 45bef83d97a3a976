"""Database engine and sessions: SQLite by default, PostgreSQL for scale-out."""

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, event, inspect
from sqlalchemy.pool import QueuePool
from sqlmodel import Session, create_engine

from gradlab import models  # noqa: F401  (registers the tables on SQLModel.metadata)
from gradlab.config import Settings

POOL_TIMEOUT_S = 10.0  # a connection checkout's longest wait (then a 503: app.main)
LOCK_WAIT_S = 30.0  # SQLite: a write's longest wait for the write lock, unless told


def make_engine(
    settings: Settings,
    *,
    pool_size: int | None = None,
    overflow: int = -1,
    lock_wait_s: float = LOCK_WAIT_S,
) -> Engine:
    """The process's engine: `db_pool_size` + `db_max_overflow` connections unless told (the
    health checks keep one of their own). A checkout waits at most POOL_TIMEOUT_S: admission
    (app/admission.py) keeps that from happening; if it does, the request gets a 503. On SQLite
    a write waits at most `lock_wait_s` for the database's write lock (web requests wait less
    than workers: a request answered 503 can be sent again, a worker's result must land)."""
    url = settings.resolved_database_url
    pool = {
        "pool_size": pool_size or settings.db_pool_size,
        "max_overflow": settings.db_max_overflow if overflow < 0 else overflow,
        "pool_timeout": POOL_TIMEOUT_S,
    }
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, **pool)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": lock_wait_s},
        poolclass=QueuePool,
        **pool,
    )

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        # WAL lets the web process read while a worker process writes a result.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(lock_wait_s * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine


MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# The schema that `create_all` made before migrations existed: such a database is stamped with
# this revision, then upgraded like any other.
BASELINE_REVISION = "0001"
BASELINE_TABLES = {"submission", "job"}
MIGRATION_LOCK_ID = 0x67726164  # "grad": one advisory lock for every gradlab process


def migration_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


@contextmanager
def _migration_lock(engine: Engine, connection: Connection) -> Iterator[None]:
    """One process migrates at a time: the web app and every worker call `init_db` at start."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
        yield
    elif engine.url.database and engine.url.database != ":memory:":
        with open(f"{engine.url.database}.migrate.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
    else:
        yield


def init_db(engine: Engine) -> None:
    """Bring the schema to the newest migration (creating it on an empty database)."""
    with engine.connect() as connection, _migration_lock(engine, connection):
        config = migration_config(connection)
        tables = set(inspect(connection).get_table_names())
        if "alembic_version" not in tables and tables >= BASELINE_TABLES:
            command.stamp(config, BASELINE_REVISION)
        command.upgrade(config, "head")
        connection.commit()


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session
