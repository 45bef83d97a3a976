"""A throwaway PostgreSQL server for the test session (pytest plugin, see tests/conftest.py).

`initdb` + `pg_ctl` on a temporary directory, on a free TCP port of 127.0.0.1 with its unix
socket in that directory, fsync off (nothing here has to survive a crash). As root the server runs
as an unprivileged user (`postgres` when the Debian package made one, else `nobody`) through
`runuser`, because postgres refuses to run as root. Each test gets its own database, copied from
a template that already has the tables (`CREATE DATABASE ... TEMPLATE`, a file copy: fast).

Missing binaries fail the tests that need them loudly: `scripts/bootstrap.sh --test` installs
them. Nothing here skips.
"""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BOTH_DATABASES = ("sqlite", "postgresql")
both_databases = pytest.mark.parametrize("database_url", BOTH_DATABASES, indirect=True)
"""Run a test (or, as `pytestmark`, a module) on SQLite and on PostgreSQL."""
postgresql_only = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

TEMPLATE = "gradlab_template"
SUPERUSER = "gradlab"


def find_pg_bin() -> Path:
    """The directory of initdb/pg_ctl: $GRADLAB_PG_BIN, Debian's newest, or the PATH."""
    if configured := os.environ.get("GRADLAB_PG_BIN"):
        return Path(configured)
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if debian:
        return Path(debian[-1]).parent
    if found := shutil.which("initdb"):
        return Path(found).resolve().parent
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: the tests run on PostgreSQL too. "
        "Install them with `scripts/bootstrap.sh --test` (apt package `postgresql`) or point "
        "GRADLAB_PG_BIN at their directory."
    )


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    bin_dir: Path
    root: Path
    port: int
    run_as: str | None
    databases: list[str] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _command(self, *args: str) -> list[str]:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.run_as is None:
            return command
        return ["runuser", "-u", self.run_as, "--", *command]

    def run(self, *args: str) -> None:
        completed = subprocess.run(
            self._command(*args), capture_output=True, text=True, cwd=self.root, check=False
        )
        if completed.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args[:2])} failed ({completed.returncode}):\n"
                f"{completed.stdout[-2000:]}\n{completed.stderr[-2000:]}"
            )

    def start(self) -> None:
        self.run(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        )
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.root}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=300",
                "-c shared_buffers=64MB",
            ]
        )
        log = self.root / "postgres.log"
        self.run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(log),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        self.run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")

    def execute(self, sql: str) -> None:
        """Run one statement in autocommit (CREATE/DROP DATABASE cannot run in a transaction)."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_template(self) -> None:
        """A database with gradlab's tables, the template of every test database."""
        from sqlmodel import create_engine

        from gradlab.db import init_db

        self.execute(f"CREATE DATABASE {TEMPLATE}")
        engine = create_engine(self.url(TEMPLATE))
        init_db(engine)
        engine.dispose()

    def create_database(self) -> str:
        """A fresh database with the tables; returns its SQLAlchemy URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        self.databases.append(name)
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _unprivileged_user() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root, but there is no `postgres` or `nobody` user to run as")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole session, stopped and deleted at the end."""
    bin_dir = find_pg_bin()
    run_as = _unprivileged_user()
    root = Path(tempfile.mkdtemp(prefix="gradlab-pg-"))
    if run_as is not None:
        entry = pwd.getpwnam(run_as)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = PostgresServer(bin_dir=bin_dir, root=root, port=free_port(), run_as=run_as)
    started = time.monotonic()
    server.start()
    try:
        server.create_template()
        print(
            f"\npostgres: {bin_dir} on port {server.port}, up in {time.monotonic() - started:.1f} s"
        )
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    url = postgres_server.create_database()
    yield url
    postgres_server.drop_database(url)


@pytest.fixture
def database_url(request: pytest.FixtureRequest) -> str | None:
    """The database of the `settings` fixture: None (SQLite in the test's data dir) unless a
    test is parametrized with `both_databases` (indirect), then also a fresh PostgreSQL one."""
    backend = getattr(request, "param", "sqlite")
    if backend == "sqlite":
        return None
    if backend == "postgresql":
        return request.getfixturevalue("postgres_url")
    raise ValueError(f"unknown database backend {backend!r}")
