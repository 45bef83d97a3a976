"""/healthz checks what it claims, through real storage faults: a database that cannot take a
write (read-only PostgreSQL, a full disk), an SQLite file deleted or replaced while the server
runs, and an instance that expects workers while none is alive. Each is a 503 naming the part."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from app.main import create_app
from gradlab.config import PROJECT_ROOT, Settings
from gradlab.models import WorkerHeartbeat
from tests.pg import PostgresServer, both_databases


def _failing(response) -> dict[str, str]:  # type: ignore[no-untyped-def]
    body = response.json()
    return {name: check["detail"] for name, check in body["checks"].items() if not check["ok"]}


@both_databases
def test_healthy_server_reports_every_check(client: TestClient) -> None:
    started = time.monotonic()
    response = client.get("/healthz")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert body["checks"]["database"] == {"ok": True, "detail": "ok"}
    assert body["checks"]["disk"]["ok"] and "MiB free" in body["checks"]["disk"]["detail"]
    assert "workers" not in body["checks"]  # none expected by default
    assert time.monotonic() - started < 1.0


def test_a_read_only_database_fails_the_write_check(
    settings: Settings, postgres_server: PostgresServer, postgres_url: str
) -> None:
    """A failed-over replica, or a database put read-only by its operator: `SELECT 1` works,
    every submission would fail."""
    settings.database_url = postgres_url
    app = create_app(settings)
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        name = postgres_url.rsplit("/", 1)[1]
        postgres_server.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
        app.state.health_engine.dispose()  # new sessions get the database's new default
        response = client.get("/healthz")
    assert response.status_code == 503, response.text
    assert response.json()["status"] == "error"
    assert "read-only" in _failing(response)["database"]


def test_a_deleted_then_recreated_sqlite_file_is_reported(settings: Settings) -> None:
    app = create_app(settings)
    database = settings.data_dir / "gradlab.db"
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        for suffix in ("", "-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
        gone = client.get("/healthz")
        assert gone.status_code == 503
        assert "deleted while the server runs" in _failing(gone)["database_file"]
        database.write_bytes(b"")  # another process (or a restore) made a new file there
        other = client.get("/healthz")
        assert other.status_code == 503
        assert "another file" in _failing(other)["database_file"]


def test_no_live_worker_fails_when_workers_are_expected(settings: Settings) -> None:
    settings.expect_workers = True
    app = create_app(settings)
    with TestClient(app) as client:
        response = client.get("/healthz")
        assert response.status_code == 503
        assert "no live worker" in _failing(response)["workers"]
        with Session(app.state.engine) as session:
            now = time.time()
            session.add(
                WorkerHeartbeat(
                    worker_id="w1",
                    host="h",
                    pid=1,
                    slots=1,
                    device="cpu",
                    started_at=now,
                    last_seen=now,
                    stats_json="{}",
                )
            )
            session.commit()
        live = client.get("/healthz")
        assert live.status_code == 200, live.text
        assert live.json()["checks"]["workers"]["detail"] == "1 live"


FULL_DISK = """
import sys
from pathlib import Path
from fastapi.testclient import TestClient
from app.main import create_app
from gradlab.config import Settings

data = Path(sys.argv[1])
settings = Settings(data_dir=data, content_dir=Path(sys.argv[2]), min_free_disk_mb=1)
app = create_app(settings)
with TestClient(app) as client:
    assert client.get("/healthz").status_code == 200
    try:
        with open(data / "filler", "wb") as filler:  # fill the disk to the last block
            while True:
                filler.write(b"\\0" * 65536)
                filler.flush()
    except OSError:  # ENOSPC, from a write or from the close's last flush
        pass
    response = client.get("/healthz")
    failing = sorted(n for n, c in response.json()["checks"].items() if not c["ok"])
    print(response.status_code, *failing)
"""


def test_a_full_disk_fails_the_disk_check(tmp_path: Path) -> None:
    """A real full file system: a 4 MiB tmpfs in a private mount namespace (user namespaces
    work wherever the sandbox does), holding the data directory."""
    data = tmp_path / "data"
    data.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    command = textwrap.dedent(f"""
        mount -t tmpfs -o size=4m tmpfs {data} &&
        exec {sys.executable} {script} {data} {PROJECT_ROOT / "lessons"}
    """)
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", command],
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    status, *failing = result.stdout.split()
    assert status == "503" and "disk" in failing, result.stdout
