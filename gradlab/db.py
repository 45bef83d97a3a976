"""Database engine and sessions: SQLite by default, PostgreSQL for scale-out."""

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, event
from sqlmodel import Session, SQLModel, create_engine

from gradlab import models  # noqa: F401  (registers the tables on SQLModel.metadata)
from gradlab.config import Settings


def make_engine(settings: Settings) -> Engine:
    url = settings.resolved_database_url
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        # WAL lets the web process read while a worker process writes a result.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine


def init_db(engine: Engine) -> None:
    """Create missing tables (migrations come with the PostgreSQL work)."""
    SQLModel.metadata.create_all(engine)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session
