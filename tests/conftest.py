"""Shared fixtures: isolated settings (temp data dir), the real content, a web client."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import Content, load_content

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
def client(settings: Settings) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(settings)) as test_client:
        yield test_client
