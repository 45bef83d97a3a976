"""Shared fixtures: isolated settings (temp data dir), the real content, a web client."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import Content, load_content

if TYPE_CHECKING:
    from fastapi.testclient import TestClient
    from playwright.sync_api import Browser

pytest.register_assert_rewrite("tests.pg")  # imported here, before pytest loads it as a plugin
from tests.pg import free_port  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"

pytest_plugins = ["tests.pg"]  # postgres_server, database_url, both_databases


CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


def csrf_token(client: "TestClient | httpx.Client") -> str:
    """The CSRF token of `client`'s learner cookie (from a page's meta tag), for form posts."""
    response = client.get("/en/")
    assert response.status_code == 200, response.text
    found = CSRF_META.search(response.text)
    assert found, "no <meta name=csrf-token> on the page"
    return found.group(1)


@pytest.fixture
def settings(tmp_path: Path, database_url: str | None) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        content_dir=PROJECT_ROOT / "lessons",
        secret_key="test-secret",
        poll_interval_s=0.05,
    )


@pytest.fixture(scope="session")
def content() -> Content:
    return load_content(PROJECT_ROOT / "lessons")


@pytest.fixture
def client(settings: Settings) -> Iterator["TestClient"]:
    from fastapi.testclient import TestClient  # imported here: GPU-only runs lack FastAPI

    from app.main import create_app

    with TestClient(create_app(settings)) as test_client:
        yield test_client


@dataclass(frozen=True)
class Served:
    url: str
    process: subprocess.Popen


def wait_until_serving(
    process: subprocess.Popen, base: str, log_path: Path, timeout_s: float = 60
) -> None:
    """Until `base` answers a page; the test fails with the server's log if it exits first or
    never answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{base}/en/", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    pytest.fail(f"server did not start: {log_path.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A real `gradlab serve` (web + one local worker) on a free port, short leases; on SQLite,
    or on PostgreSQL when parametrized indirectly (`parametrize("served", BOTH_DATABASES)`)."""
    backend = getattr(request, "param", "sqlite")
    data_dir = tmp_path_factory.mktemp(f"serve-data-{backend}")
    port = free_port()
    env = {
        **os.environ,
        "GRADLAB_DATA_DIR": str(data_dir),
        "GRADLAB_POLL_INTERVAL_S": "0.1",
        "GRADLAB_LEASE_S": "3",
    }
    if backend == "postgresql":
        env["GRADLAB_DATABASE_URL"] = request.getfixturevalue("postgres_server").create_database()
    log_path = data_dir / "serve.log"  # a file, not a pipe: nobody reads a pipe while tests run
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gradlab.cli", "serve", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    wait_until_serving(process, base, log_path)
    yield Served(base, process)
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("gradlab serve did not stop on SIGINT")
    finally:
        log_file.close()
    assert (data_dir / "gradlab.db").exists() == (backend == "sqlite")


@pytest.fixture
def server(served: Served) -> str:
    return served.url


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # Debian's, driven by Playwright


@pytest.fixture(scope="session")
def browser() -> Iterator["Browser"]:
    """One headless Chromium for the browser tests (each test opens its own contexts)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield launched
        launched.close()
