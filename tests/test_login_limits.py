"""Login limits that strangers cannot turn into a lockout (per address and email, per address,
then slowly per email), and the client address they count: the peer's, unless `gradlab serve`
is told to trust a proxy (GRADLAB_FORWARDED_ALLOW_IPS)."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app.i18n import gettext
from gradlab.config import PROJECT_ROOT, Settings
from tests.conftest import csrf_token, wait_until_serving
from tests.pg import free_port

EMAIL = "ada@example.org"
PASSWORD = "correct horse"
WRONG = {"email": EMAIL, "password": "wrong password"}
RIGHT = {"email": EMAIL, "password": PASSWORD}
ADDRESS_A, ADDRESS_B, ADDRESS_C = "203.0.113.7", "198.51.100.23", "192.0.2.99"


def make_app(tmp_path: Path, **overrides: object) -> object:
    from app.main import create_app

    settings = Settings(
        data_dir=tmp_path / "data",
        content_dir=PROJECT_ROOT / "lessons",
        secret_key="test-secret",
        **overrides,  # type: ignore[arg-type]
    )
    return create_app(settings)


def at(app: object, address: str) -> TestClient:
    """A browser of `app` whose connection comes from `address`."""
    return TestClient(app, client=(address, 40000))  # type: ignore[arg-type]


def with_account(app: object) -> None:
    with at(app, "192.0.2.1") as owner:
        response = owner.post("/api/v1/auth/register", json=RIGHT)
        assert response.status_code == 201, response.text


# --- a stranger cannot lock the owner out ----------------------------------------------------


def test_hammering_an_email_from_one_address_does_not_lock_out_its_owner(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path)  # the default limits: 10/min, 30/min, 100/hour
    with_account(app)
    with at(app, ADDRESS_A) as attacker:
        answers = [attacker.post("/api/v1/auth/login", json=WRONG) for _ in range(20)]
        assert [a.status_code for a in answers[:10]] == [401] * 10
        assert {a.status_code for a in answers[10:]} == {429}
        assert 1 <= int(answers[-1].headers["retry-after"]) <= 60
        # even the right password waits at the attacker's address
        assert attacker.post("/api/v1/auth/login", json=RIGHT).status_code == 429
    with at(app, ADDRESS_B) as owner:
        login = owner.post("/api/v1/auth/login", json=RIGHT)
        assert login.status_code == 200, login.text
        assert owner.get("/api/v1/auth/me").json()["email"] == EMAIL
    with at(app, ADDRESS_C) as browser:  # the login page too
        page = browser.post(
            "/de/login", data={**RIGHT, "csrf_token": csrf_token(browser)}, follow_redirects=False
        )
        assert page.status_code == 303


def test_one_address_is_limited_across_emails(tmp_path: Path) -> None:
    app = make_app(tmp_path, login_ip_rate_limit=4)
    with at(app, ADDRESS_A) as sprayer:
        for n in range(4):
            body = {"email": f"user{n}@example.org", "password": "wrong password"}
            assert sprayer.post("/api/v1/auth/login", json=body).status_code == 401
        refused = sprayer.post("/api/v1/auth/login", json={**WRONG, "email": "new@example.org"})
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert "Too many attempts" in refused.json()["detail"]
        page = sprayer.post("/tr/login", data={**WRONG, "csrf_token": csrf_token(sprayer)})
        assert page.status_code == 429 and "retry-after" in page.headers
        assert gettext("tr", "Too many attempts. Please wait a minute and try again.") in page.text
    with at(app, ADDRESS_B) as elsewhere:
        assert elsewhere.post("/api/v1/auth/login", json=WRONG).status_code == 401


def test_the_slow_per_email_limit_counts_only_attempts_the_narrow_limits_let_through(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path, login_rate_limit=3, login_email_rate_limit=5)
    with_account(app)
    with at(app, ADDRESS_A) as attacker:  # 3 attempts count; the 17 refused ones do not
        codes = [attacker.post("/api/v1/auth/login", json=WRONG).status_code for _ in range(20)]
        assert codes == [401] * 3 + [429] * 17
    with at(app, ADDRESS_B) as second:  # 2 more: the email's 5 attempts of the hour
        assert [second.post("/api/v1/auth/login", json=WRONG).status_code for _ in range(2)] == [
            401,
            401,
        ]
    with at(app, ADDRESS_C) as third:  # a distributed attack reaches the hourly limit
        refused = third.post("/api/v1/auth/login", json=RIGHT)
        assert refused.status_code == 429
        assert 60 < int(refused.headers["retry-after"]) <= 3600
        other = {"email": "someone@example.org", "password": "wrong password"}
        assert third.post("/api/v1/auth/login", json=other).status_code == 401  # other emails


def test_addresses_of_one_ipv6_slash_64_share_their_limits(tmp_path: Path) -> None:
    app = make_app(tmp_path, login_rate_limit=2)
    for host in ("2001:db8:1:2::1", "2001:db8:1:2::abcd"):
        with at(app, host) as client:
            assert client.post("/api/v1/auth/login", json=WRONG).status_code == 401
    with at(app, "2001:db8:1:2:ffff::9") as same_block:
        assert same_block.post("/api/v1/auth/login", json=WRONG).status_code == 429
    with at(app, "2001:db8:1:3::1") as next_block:
        assert next_block.post("/api/v1/auth/login", json=WRONG).status_code == 401


# --- forwarded headers ---------------------------------------------------------------------


def test_forwarded_headers_are_trusted_only_when_configured() -> None:
    assert Settings().forwarded_allow_ips == ""
    assert Settings().uvicorn_proxy_options() == {"proxy_headers": False}
    assert Settings(forwarded_allow_ips=" , ").uvicorn_proxy_options() == {"proxy_headers": False}
    assert Settings(forwarded_allow_ips="10.0.0.1, 10.1.0.0/16").uvicorn_proxy_options() == {
        "proxy_headers": True,
        "forwarded_allow_ips": "10.0.0.1,10.1.0.0/16",
    }

    async def bare(scope: object, receive: object, send: object) -> None:
        raise AssertionError("never called")

    for options, wrapped in [
        (Settings().uvicorn_proxy_options(), False),
        (Settings(forwarded_allow_ips="127.0.0.1").uvicorn_proxy_options(), True),
    ]:
        config = uvicorn.Config(bare, **options)  # type: ignore[arg-type]
        config.load()
        assert isinstance(config.loaded_app, ProxyHeadersMiddleware) == wrapped, options


def _serve(tmp_path: Path, **env: str) -> Iterator[str]:
    """A real `gradlab serve --workers 0` on a free port (as tests/conftest.py's `served`)."""
    port = free_port()
    data_dir = tmp_path / "data"
    data_dir.mkdir(parents=True)
    log_path = data_dir / "serve.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "gradlab.cli", "serve", "--port", str(port), "--workers", "0"],
            cwd=PROJECT_ROOT,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("GRADLAB_")},
                "GRADLAB_DATA_DIR": str(data_dir),
                "FORWARDED_ALLOW_IPS": "*",  # uvicorn's own fallback must not matter either
                **env,
            },
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_serving(process, base, log_path)
            yield base
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _spoofed_logins(base: str, n: int) -> list[int]:
    """`n` failed logins from 127.0.0.1, each with a new email and a new X-Forwarded-For."""
    codes = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for i in range(n):
            response = client.post(
                "/api/v1/auth/login",
                json={"email": f"user{i}@example.org", "password": "wrong password"},
                headers={"X-Forwarded-For": f"203.0.113.{i + 1}"},
            )
            codes.append(response.status_code)
            if response.status_code == 429:
                assert int(response.headers["retry-after"]) >= 1
    return codes


@pytest.mark.slow
def test_serve_counts_the_peer_address_despite_x_forwarded_for(tmp_path: Path) -> None:
    for base in _serve(tmp_path / "default", GRADLAB_LOGIN_IP_RATE_LIMIT="3"):
        assert _spoofed_logins(base, 5) == [401, 401, 401, 429, 429]
    # configured: the proxy's header names the client, so each forwarded address has its own
    for base in _serve(
        tmp_path / "proxied",
        GRADLAB_LOGIN_IP_RATE_LIMIT="3",
        GRADLAB_FORWARDED_ALLOW_IPS="127.0.0.1",
    ):
        assert _spoofed_logins(base, 5) == [401] * 5
