"""Alembic environment: the tables of `gradlab.models`, on whatever database the settings name.

`gradlab.db.init_db` runs the migrations in-process with its own connection (passed in
`config.attributes["connection"]`); the `alembic` command line (alembic.ini at the repository
root) connects to `GRADLAB_DATABASE_URL` / the default SQLite file itself.
"""

from alembic import context
from sqlalchemy import Connection, create_engine
from sqlmodel import SQLModel

from gradlab import models  # noqa: F401  (registers the tables on SQLModel.metadata)
from gradlab.config import get_settings

target_metadata = SQLModel.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things: Alembic copies and renames tables ("batch" mode).
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url
    engine = create_engine(url)
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run them online")
run_migrations_online()
