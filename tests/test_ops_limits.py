"""Who may read /metrics: the bearer token when one is configured (16+ characters, blank means
unset), otherwise loopback clients only; compose's default must leave it that way."""

import re
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.main import create_app
from gradlab.config import PROJECT_ROOT, Settings

TOKEN = "0123456789abcdef-metrics"  # 24 characters
REMOTE = "203.0.113.9"  # TEST-NET-3
LOOPBACK_PEERS = ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"]
OTHER_PEERS = ["203.0.113.9", "10.0.0.7", "192.168.1.2", "::ffff:203.0.113.9", "2001:db8::1"]


def _get(app: FastAPI, host: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET /metrics as if from `host` (starlette's TestClient sets the ASGI scope's client)."""
    return TestClient(app, client=(host, 40000)).get("/metrics", headers=headers or {})


def _app(data_dir: Path, metrics_token: str | None) -> FastAPI:
    return create_app(
        Settings(data_dir=data_dir, secret_key="test-secret", metrics_token=metrics_token)
    )


@pytest.fixture(scope="module")
def open_app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    """The app as `gradlab serve` runs it without GRADLAB_METRICS_TOKEN (one per module: the
    tests only read)."""
    return _app(tmp_path_factory.mktemp("open"), None)


@pytest.fixture(scope="module")
def guarded_app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    return _app(tmp_path_factory.mktemp("guarded"), TOKEN)


# settings


@pytest.mark.parametrize("blank", ["", " ", "\t", "  \n "])
def test_blank_token_from_the_environment_counts_as_unset(
    blank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRADLAB_METRICS_TOKEN", blank)  # what compose passes for an unset var
    assert Settings().metrics_token is None
    assert Settings(metrics_token=blank).metrics_token is None


@pytest.mark.parametrize("short", ["x", "s3cret", "fifteen-chars15"])
def test_short_token_is_refused_at_startup(short: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADLAB_METRICS_TOKEN", short)
    with pytest.raises(ValidationError, match="GRADLAB_METRICS_TOKEN must be at least 16"):
        Settings()


@pytest.mark.parametrize(
    "bad", ["sixteen chars ok here", "token-with-\x01-control!", "ünïcödé-token-1234"]
)
def test_token_a_header_cannot_carry_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="printable ASCII without spaces"):
        Settings(metrics_token=bad)


def test_token_of_16_characters_is_kept_without_surrounding_blanks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GRADLAB_METRICS_TOKEN", " 0123456789abcdef\n")
    assert Settings().metrics_token == "0123456789abcdef"


def test_compose_default_leaves_the_token_unset() -> None:
    """compose substitutes its `${VAR:-default}`: that default must mean "unset" (loopback only),
    never a fixed token, and never a blank that an empty bearer token would match."""
    compose = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
    for service in compose["services"].values():
        value = (service.get("environment") or {}).get("GRADLAB_METRICS_TOKEN")
        if value is None:
            continue
        found = re.fullmatch(r"\$\{GRADLAB_METRICS_TOKEN(?::?-(?P<default>[^}]*))?\}", value)
        assert found, f"GRADLAB_METRICS_TOKEN must come from the environment, not {value!r}"
        assert Settings(metrics_token=found["default"] or "").metrics_token is None


# no token: loopback only


@pytest.mark.parametrize("host", [*OTHER_PEERS, "testclient"])
def test_without_token_other_clients_get_403_naming_the_setting(
    open_app: FastAPI, host: str
) -> None:
    response = _get(open_app, host)
    assert response.status_code == 403
    detail = response.json()["detail"]
    assert "GRADLAB_METRICS_TOKEN" in detail and "loopback" in detail
    assert "gradlab_" not in response.text  # nothing of the metrics leaks


@pytest.mark.parametrize("header", ["Bearer ", "Bearer", "Bearer  ", "bearer "])
def test_empty_bearer_token_opens_nothing(open_app: FastAPI, header: str) -> None:
    assert _get(open_app, REMOTE, {"Authorization": header}).status_code == 403


def test_compose_style_empty_token_does_not_match_an_empty_bearer(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reported bug: GRADLAB_METRICS_TOKEN="" and `Authorization: Bearer ` gave 200."""
    monkeypatch.setenv("GRADLAB_METRICS_TOKEN", "")
    from_env = Settings(**settings.model_dump(exclude={"metrics_token"}))
    app = create_app(from_env)
    assert _get(app, REMOTE, {"Authorization": "Bearer "}).status_code == 403


def test_blank_token_set_after_validation_still_counts_as_unset(settings: Settings) -> None:
    settings.metrics_token = "   "  # assignment skips validators: the route must not trust it
    app = create_app(settings)
    assert _get(app, REMOTE, {"Authorization": "Bearer    "}).status_code == 403
    assert _get(app, REMOTE, {"Authorization": "Bearer "}).status_code == 403


@pytest.mark.parametrize("host", LOOPBACK_PEERS)
def test_without_token_loopback_clients_get_the_metrics(open_app: FastAPI, host: str) -> None:
    response = _get(open_app, host)
    assert response.status_code == 200
    assert "gradlab_queue_depth" in response.text


@pytest.mark.parametrize(
    "relay",
    [
        {"X-Forwarded-For": "203.0.113.9"},
        {"Forwarded": "for=203.0.113.9"},
        {"X-Real-IP": "203.0.113.9"},
        {"X-Forwarded-For": "127.0.0.1"},
    ],
)
def test_without_token_requests_relayed_by_a_local_proxy_get_403(
    open_app: FastAPI, relay: dict[str, str]
) -> None:
    """A reverse proxy on the host connects from loopback: its peer address proves nothing."""
    assert _get(open_app, "127.0.0.1", relay).status_code == 403


# token set: everyone needs it


@pytest.mark.parametrize("host", [REMOTE, "127.0.0.1"])
@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer ", "Bearer", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", f"Basic {TOKEN}"],
)
def test_with_token_anything_but_the_token_is_401(
    guarded_app: FastAPI, host: str, header: str | None
) -> None:
    headers = {} if header is None else {"Authorization": header}
    response = _get(guarded_app, host, headers)
    assert response.status_code == 401
    assert response.json() == {"detail": "metrics need the bearer token"}


@pytest.mark.parametrize("host", [REMOTE, "127.0.0.1"])
def test_with_token_the_token_opens_metrics_from_anywhere(guarded_app: FastAPI, host: str) -> None:
    response = _get(guarded_app, host, {"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert "gradlab_queue_depth" in response.text
