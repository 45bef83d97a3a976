"""Alembic migrations: the same schema as the models, on SQLite and PostgreSQL; databases made
by `create_all` before migrations existed are adopted; concurrent starts migrate once."""

import threading
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, inspect, text
from sqlmodel import SQLModel

from gradlab.db import BASELINE_REVISION, MIGRATIONS, init_db, migration_config
from tests.pg import both_databases


@pytest.fixture
def engine(database_url: str | None, tmp_path: Path) -> Engine:
    url = database_url or f"sqlite:///{tmp_path / 'migrations.db'}"
    made = create_engine(url)
    if database_url:  # the template database already has the tables: start from nothing
        with made.begin() as connection:
            connection.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    yield made
    made.dispose()


def _differences(engine: Engine) -> list:
    with engine.connect() as connection:
        return compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)


def _head() -> str:
    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def _revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


@both_databases
def test_migrations_build_exactly_the_models_schema(engine: Engine) -> None:
    init_db(engine)
    assert _revision(engine) == _head()
    assert _differences(engine) == []
    init_db(engine)  # idempotent: a second start changes nothing
    assert _revision(engine) == _head()


@both_databases
def test_a_database_from_before_migrations_is_adopted_with_its_data(engine: Engine) -> None:
    with engine.connect() as connection:
        command.upgrade(migration_config(connection), BASELINE_REVISION)
        connection.exec_driver_sql("DROP TABLE alembic_version")  # as create_all left it
        connection.execute(
            text(
                "INSERT INTO submission (exercise, code, locale, id, owner, status, created_at) "
                "VALUES ('gradient-accumulation/accumulate', 'pass', 'en', 'abc', 'learner:x', "
                "'queued', 1.0)"
            )
        )
        connection.commit()
    init_db(engine)
    assert _revision(engine) == _head()
    assert _differences(engine) == []
    with engine.connect() as connection:
        owner = connection.execute(text("SELECT owner FROM submission WHERE id = 'abc'")).scalar()
    assert owner == "learner:x"


@both_databases
def test_every_migration_downgrades_to_nothing_and_back(engine: Engine) -> None:
    init_db(engine)
    with engine.connect() as connection:
        command.downgrade(migration_config(connection), "base")
        connection.commit()
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    init_db(engine)
    assert _differences(engine) == []


@both_databases
def test_processes_starting_together_migrate_once(engine: Engine) -> None:
    """The web app and the workers all call init_db at start: the lock serialises them."""
    errors: list[BaseException] = []

    def start() -> None:
        own = create_engine(engine.url)
        try:
            init_db(own)
        except BaseException as exc:  # collected, asserted below
            errors.append(exc)
        finally:
            own.dispose()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _revision(engine) == _head()
