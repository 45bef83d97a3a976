"""Shared fixtures: isolated settings (temp data dir), the real content, a web client."""

import os
import signal
import socket
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

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Served:
    url: str
    process: subprocess.Popen


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A real `gradlab serve` (web + one local worker) on a free port, short leases."""
    data_dir = tmp_path_factory.mktemp("serve-data")
    port = _free_port()
    env = {
        **os.environ,
        "GRADLAB_DATA_DIR": str(data_dir),
        "GRADLAB_POLL_INTERVAL_S": "0.1",
        "GRADLAB_LEASE_S": "3",
    }
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
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/en/", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"server did not start: {log_path.read_text()[-3000:]}")
    yield Served(base, process)
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("gradlab serve did not stop on SIGINT")
    finally:
        log_file.close()
    assert (data_dir / "gradlab.db").exists()


@pytest.fixture
def server(served: Served) -> str:
    return served.url
