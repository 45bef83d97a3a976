"""Accounts (API and pages), bearer tokens vs the session cookie, anonymous work joining an
account, CSRF on forms and on cookie-authenticated API writes, rate limits."""

import hashlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlmodel import Session, select
from starlette.routing import BaseRoute

from app.accounts.auth import SESSION_COOKIE
from app.i18n import gettext
from gradlab.config import PROJECT_ROOT, Settings
from gradlab.models import AuthToken, Submission, User
from tests.conftest import csrf_token

EXERCISE = "gradient-accumulation/accumulate"
PASSWORD = "correct horse"
CSRF_MESSAGE = (
    "For your safety, the form was not sent: its security token is missing or out of date. "
    "Go back, reload the page and try again."
)


def make_client(tmp_path: Path, **overrides: object) -> TestClient:
    from app.main import create_app

    settings = Settings(
        data_dir=tmp_path / "data",
        content_dir=PROJECT_ROOT / "lessons",
        secret_key="test-secret",
        **overrides,  # type: ignore[arg-type]
    )
    return TestClient(create_app(settings))


def register(client: TestClient, email: str = "ada@example.org", password: str = PASSWORD) -> str:
    response = client.post("/api/v1/auth/register", json={"email": email, "password": password})
    assert response.status_code == 201, response.text
    return response.json()["access_token"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def other(client: TestClient) -> Iterator[TestClient]:
    """A second browser on the same app (its own cookie jar)."""
    with TestClient(client.app) as second:
        yield second


# --- the API --------------------------------------------------------------------------------


def test_register_login_me_logout_via_the_api(client: TestClient, other: TestClient) -> None:
    token = register(client, "  Ada@Example.ORG ")
    me = client.get("/api/v1/auth/me")  # the browser: the session cookie register set
    assert me.status_code == 200
    assert me.json()["email"] == "ada@example.org"
    assert set(me.json()) == {"id", "email", "created_at"}

    login = other.post(
        "/api/v1/auth/login", json={"email": "ADA@example.org", "password": PASSWORD}
    )
    assert login.status_code == 200
    assert set(login.json()) == {"access_token", "token_type"}
    assert login.json()["token_type"] == "bearer"
    assert login.json()["access_token"] != token
    assert SESSION_COOKIE in login.cookies

    assert client.post("/api/v1/auth/logout").status_code == 204
    assert client.get("/api/v1/auth/me").status_code == 401
    assert other.get("/api/v1/auth/me").status_code == 200  # another login is untouched


def test_wrong_password_and_unknown_email_are_401(client: TestClient) -> None:
    register(client)
    for email, password in [("ada@example.org", "wrong password"), ("bob@example.org", PASSWORD)]:
        response = client.post("/api/v1/auth/login", json={"email": email, "password": password})
        assert response.status_code == 401
        assert response.json()["detail"] == "wrong email or password"


def test_duplicate_email_is_409(client: TestClient) -> None:
    register(client)
    response = client.post(
        "/api/v1/auth/register", json={"email": "ADA@example.org ", "password": "another one"}
    )
    assert response.status_code == 409
    assert "already exists" in response.json()["detail"]


@pytest.mark.parametrize(
    ("email", "password", "words"),
    [
        ("ada@example.org", "short", "at least 8 characters"),
        ("ada@example.org", "ADA@example.org", "must not be the email"),
        ("not-an-email", PASSWORD, "not a valid email"),
        ("ada@example", PASSWORD, "not a valid email"),
    ],
)
def test_weak_password_or_bad_email_is_422(
    client: TestClient, email: str, password: str, words: str
) -> None:
    response = client.post("/api/v1/auth/register", json={"email": email, "password": password})
    assert response.status_code == 422
    assert words in response.json()["detail"]


def test_malformed_bodies_are_422(client: TestClient) -> None:
    assert client.post("/api/v1/auth/register", json={"email": "a@b.org"}).status_code == 422
    assert client.post("/api/v1/auth/login", content=b"{", headers={
        "content-type": "application/json"}).status_code == 422  # fmt: skip
    too_long = {"email": "a@b.org", "password": "x" * 2000}
    assert client.post("/api/v1/auth/login", json=too_long).status_code == 422


def test_bearer_token_is_stored_hashed_and_revoked_on_logout(
    client: TestClient, other: TestClient
) -> None:
    token = register(client)
    engine = client.app.state.engine  # type: ignore[attr-defined]
    with Session(engine) as session:
        rows = session.exec(select(AuthToken)).all()
        assert [row.token_hash for row in rows] == [hashlib.sha256(token.encode()).hexdigest()]
        assert rows[0].expires_at > rows[0].created_at
        user = session.exec(select(User)).one()
        assert user.password_hash.startswith("$argon2id$") and PASSWORD not in user.password_hash

    other.cookies.clear()
    assert other.get("/api/v1/auth/me", headers=bearer(token)).status_code == 200
    assert other.post("/api/v1/auth/logout", headers=bearer(token)).status_code == 204
    revoked = other.get("/api/v1/auth/me", headers=bearer(token))
    assert revoked.status_code == 401 and "Bearer" in revoked.headers["www-authenticate"]
    assert client.get("/api/v1/auth/me").status_code == 401  # it was the cookie's token too


def test_a_bad_bearer_token_never_falls_back_to_the_cookie(client: TestClient) -> None:
    register(client)
    assert client.get("/api/v1/auth/me").status_code == 200
    assert client.get("/api/v1/auth/me", headers=bearer("nope")).status_code == 401
    assert client.get("/api/v1/auth/me", headers={"Authorization": "Basic eDp5"}).status_code == 401
    submit = client.post(
        "/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}, headers=bearer("nope")
    )
    assert submit.status_code == 401


def test_forged_session_cookie_is_anonymous(client: TestClient) -> None:
    client.cookies.set(SESSION_COOKIE, "forged.value")
    assert client.get("/api/v1/auth/me").status_code == 401
    assert client.get("/en/").status_code == 200


def test_outdated_password_hash_is_upgraded_on_login(client: TestClient) -> None:
    register(client)
    weak = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1).hash(PASSWORD)
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        user = session.exec(select(User)).one()
        user.password_hash = weak
        session.add(user)
        session.commit()
    login = client.post(
        "/api/v1/auth/login", json={"email": "ada@example.org", "password": PASSWORD}
    )
    assert login.status_code == 200
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        upgraded = session.exec(select(User)).one().password_hash
    assert upgraded != weak and PasswordHasher().verify(upgraded, PASSWORD)
    assert not PasswordHasher().check_needs_rehash(upgraded)


def test_session_cookie_flags(tmp_path: Path) -> None:
    with make_client(tmp_path) as plain:
        cookie = plain.post(
            "/api/v1/auth/register", json={"email": "a@b.org", "password": PASSWORD}
        ).headers["set-cookie"]
        session_cookie = next(c for c in cookie.split(", ") if c.startswith(SESSION_COOKIE))
        assert "HttpOnly" in session_cookie and "SameSite=lax" in session_cookie
        assert "Secure" not in session_cookie
    with make_client(tmp_path, public_base_url="https://gradlab.example") as https:
        response = https.post("/api/v1/auth/login", json={"email": "a@b.org", "password": PASSWORD})
        session_cookie = next(
            c for c in response.headers.get_list("set-cookie") if c.startswith(SESSION_COOKIE)
        )
        assert "Secure" in session_cookie and "HttpOnly" in session_cookie


# --- pages ----------------------------------------------------------------------------------


@pytest.mark.parametrize("locale", ["en", "tr"])
def test_login_and_register_pages_are_accessible_forms(client: TestClient, locale: str) -> None:
    for name, title in [("login", "Log in"), ("register", "Create account")]:
        page = client.get(f"/{locale}/{name}")
        assert page.status_code == 200
        assert f'<html lang="{locale}">' in page.text
        assert f"<h1>{gettext(locale, title)}</h1>" in page.text
        assert f'action="/{locale}/{name}"' in page.text
        for field in ("email", "password"):
            assert f'<label for="{field}">' in page.text
            assert f'id="{field}" name="{field}"' in page.text
        assert 'name="csrf_token" value="' in page.text
    assert 'autocomplete="new-password"' in client.get(f"/{locale}/register").text
    assert 'autocomplete="current-password"' in client.get(f"/{locale}/login").text


def test_register_login_logout_as_pages(client: TestClient) -> None:
    token = csrf_token(client)
    response = client.post(
        "/de/register",
        data={"email": "ada@example.org", "password": PASSWORD, "csrf_token": token},
        follow_redirects=False,
    )
    assert response.status_code == 303 and response.headers["location"] == "/de/"
    course = client.get("/de/")
    assert gettext("de", "Signed in as %(email)s", email="ada@example.org") in course.text
    assert 'action="/de/logout"' in course.text
    assert client.get("/api/v1/auth/me").status_code == 200

    out = client.post("/de/logout", data={"csrf_token": token}, follow_redirects=False)
    assert out.status_code == 303
    assert client.get("/api/v1/auth/me").status_code == 401
    assert 'href="/de/login"' in client.get("/de/").text

    wrong = client.post(
        "/de/login",
        data={"email": "ada@example.org", "password": "nope nope", "csrf_token": token},
    )
    assert wrong.status_code == 401
    assert gettext("de", "The email address or the password is wrong.") in wrong.text
    assert 'role="alert"' in wrong.text and 'aria-invalid="true"' in wrong.text
    assert 'value="ada@example.org"' in wrong.text  # the email is kept, the password is not

    ok = client.post(
        "/de/login",
        data={
            "email": "ada@example.org", "password": PASSWORD, "csrf_token": token,
            "next": "/de/lessons/profiling",
        },
        follow_redirects=False,
    )  # fmt: skip
    assert ok.status_code == 303 and ok.headers["location"] == "/de/lessons/profiling"
    assert client.get("/api/v1/auth/me").status_code == 200


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/", "/\\evil.example"])
def test_login_never_redirects_off_site(client: TestClient, target: str) -> None:
    register(client)
    client.post("/api/v1/auth/logout")
    response = client.post(
        "/en/login",
        data={"email": "ada@example.org", "password": PASSWORD, "csrf_token": csrf_token(client),
              "next": target},
        follow_redirects=False,
    )  # fmt: skip
    assert response.status_code == 303 and response.headers["location"] == "/en/"


@pytest.mark.parametrize(
    ("email", "password", "status", "message"),
    [
        ("ada@example.org", "short", 422, "The password is too short: use at least 8 characters."),
        ("nope", PASSWORD, 422, "Enter a valid email address, like name@example.com."),
        ("taken@example.org", PASSWORD, 409,
         "An account with this email address already exists. Log in instead?"),
    ],
)  # fmt: skip
def test_register_page_errors_are_localized(
    client: TestClient, email: str, password: str, status: int, message: str
) -> None:
    register(client, "taken@example.org")
    client.post("/api/v1/auth/logout")
    response = client.post(
        "/tr/register",
        data={"email": email, "password": password, "csrf_token": csrf_token(client)},
    )
    assert response.status_code == status
    assert gettext("tr", message) in response.text
    assert 'aria-invalid="true"' in response.text


# --- anonymous work joins the account ---------------------------------------------------------


def grade_all(client: TestClient, status: str) -> None:
    """Play the worker: lease every queued job and write `status` through queue.finish."""
    from gradlab import queue
    from gradlab.results import Check, GradeResult

    passed = status == "passed"
    result = GradeResult.from_checks(
        [Check(id="x", passed=passed, points=float(passed), max_points=1, message="")]
    )
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        while job := queue.claim(session=session, worker_id="t", lease_s=30, max_attempts=3):
            assert queue.finish(session=session, job_id=job.job_id, worker_id="t", result=result)


def test_anonymous_work_joins_the_account_on_register(
    client: TestClient, other: TestClient
) -> None:
    submitted = client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}).json()
    assert client.put(
        "/api/v1/progress/gradient-accumulation", json={"last_section": "recap", "read": True}
    ).status_code == 200  # fmt: skip
    draft_url = "/api/v1/drafts/profiling/find-the-bottleneck"
    assert client.put(draft_url, json={"code": "draft"}).status_code == 200
    token = register(client)

    assert client.get(submitted["url"]).status_code == 200  # still mine, now the account's
    other.cookies.clear()
    assert other.get(submitted["url"], headers=bearer(token)).status_code == 200  # a phone
    state = other.get("/api/v1/progress", headers=bearer(token)).json()
    lesson = state["lessons"]["gradient-accumulation"]
    assert lesson["read"] is True and lesson["last_section"] == "recap"
    assert lesson["exercises"][EXERCISE] == "attempted"
    draft = other.get("/api/v1/drafts/profiling/find-the-bottleneck", headers=bearer(token))
    assert draft.json()["code"] == "draft"
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        owners = {s.owner for s in session.exec(select(Submission)).all()}
    assert len(owners) == 1 and owners.pop().startswith("user:")


def test_merging_on_login_keeps_the_best_of_both(client: TestClient, other: TestClient) -> None:
    # the account, on a first device: passed the exercise, an older reading position
    token = register(client)
    client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "good"})
    grade_all(client, "passed")
    client.put(
        "/api/v1/progress/gradient-accumulation", json={"last_section": "core-trick", "read": True}
    )
    client.put("/api/v1/drafts/gradient-accumulation/accumulate", json={"code": "old draft"})
    # anonymous on a second device: attempted (failed), a newer position, a newer draft
    other.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "bad"})
    grade_all(other, "failed")
    other.put("/api/v1/progress/gradient-accumulation", json={"last_section": "recap"})
    other.put("/api/v1/drafts/gradient-accumulation/accumulate", json={"code": "new draft"})
    other.put("/api/v1/progress/profiling", json={"read": True})
    login = other.post(
        "/api/v1/auth/login", json={"email": "ada@example.org", "password": PASSWORD}
    )
    assert login.status_code == 200

    for view in (client.get("/api/v1/progress"), other.get("/api/v1/progress")):
        lessons = view.json()["lessons"]
        ga = lessons["gradient-accumulation"]
        assert ga["exercises"][EXERCISE] == "passed"  # passed beats attempted
        assert ga["read"] is True  # read on either device
        assert ga["last_section"] == "recap"  # the latest position
        assert lessons["profiling"]["read"] is True
    draft = client.get("/api/v1/drafts/gradient-accumulation/accumulate", headers=bearer(token))
    assert draft.json()["code"] == "new draft"


# --- CSRF -------------------------------------------------------------------------------------


def all_routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    for route in routes:
        inner = getattr(route, "original_router", None)  # an included router (newer FastAPI)
        yield from all_routes(inner.routes) if inner is not None else [route]


def form_routes(client: TestClient) -> list[str]:
    """Every unsafe page route outside the JSON API."""
    paths = []
    for route in all_routes(client.app.routes):  # type: ignore[attr-defined]
        if not isinstance(route, APIRoute) or route.path.startswith("/api/"):
            continue
        if route.methods & {"POST", "PUT", "PATCH", "DELETE"}:
            assert route.methods == {"POST"}, f"{route.path}: a form can only POST"
            paths.append(route.path)
    return paths


def test_every_form_post_needs_the_csrf_token(client: TestClient) -> None:
    paths = form_routes(client)
    assert {
        "/{locale}/lessons/{lesson}/quiz",
        "/{locale}/lessons/{lesson}/exercises/{exercise}",
        "/{locale}/login",
        "/{locale}/register",
        "/{locale}/logout",
    } <= set(paths)
    values = {"locale": "de", "lesson": "gradient-accumulation", "exercise": "accumulate"}
    form = {"answer": "0", "code": "x", "email": "a@b.org", "password": PASSWORD}
    for path in paths:
        url = path.format(**values)
        for token in (None, "", "forged-token"):
            data = form if token is None else {**form, "csrf_token": token}
            response = client.post(url, data=data, follow_redirects=False)
            assert response.status_code == 403, (url, token, response.text[:200])
            assert response.headers["content-type"].startswith("text/html")
            assert f"<h1>{gettext('de', 'This form has expired')}</h1>" in response.text
            assert '<html lang="de">' in response.text
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        assert session.exec(select(Submission)).all() == []
        assert session.exec(select(User)).all() == []


def test_csrf_token_is_bound_to_the_learner(client: TestClient, other: TestClient) -> None:
    mine, theirs = csrf_token(client), csrf_token(other)
    assert mine != theirs
    url = "/en/lessons/gradient-accumulation/quiz"
    assert client.post(url, data={"answer": "0", "csrf_token": theirs}).status_code == 403
    ok = client.post(url, data={"answer": "0", "csrf_token": mine}, follow_redirects=False)
    assert ok.status_code == 303
    # a script posting the form may send the header instead of the field
    header = client.post(
        url, data={"answer": "0"}, headers={"X-CSRF-Token": mine}, follow_redirects=False
    )
    assert header.status_code == 303


def test_csrf_refusal_as_json_for_a_script(client: TestClient) -> None:
    response = client.post(
        "/es/lessons/gradient-accumulation/exercises/accumulate",
        data={"code": "x"},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 403
    assert response.json()["detail"] == gettext("es", CSRF_MESSAGE)
    assert response.json()["detail"].startswith("Por tu seguridad")


def test_forms_carry_the_token(client: TestClient) -> None:
    token = csrf_token(client)
    lesson = client.get("/en/lessons/gradient-accumulation").text
    assert f'<meta name="csrf-token" content="{token}">' in lesson
    forms = re.findall(r"<form[^>]*method=\"post\".*?</form>", lesson, flags=re.S)
    assert forms and all(f'name="csrf_token" value="{token}"' in form for form in forms)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": "https://evil.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Sec-Fetch-Site": "cross-site"}, 403),
        ({"Sec-Fetch-Site": "same-site"}, 403),
        ({"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"}, 202),
        ({"Origin": "http://testserver"}, 202),
        ({}, 202),  # not a browser: nothing a victim's browser could be made to send
    ],
)
def test_cookie_authenticated_api_writes_refuse_cross_site_requests(
    client: TestClient, headers: dict[str, str], status: int
) -> None:
    response = client.post(
        "/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}, headers=headers
    )
    assert response.status_code == status, response.text


def test_cross_site_api_write_passes_with_token_header_or_bearer(client: TestClient) -> None:
    evil = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    body = {"exercise": EXERCISE, "code": "x"}
    read = client.put("/api/v1/progress/profiling", json={"read": True}, headers=evil)
    assert read.status_code == 403
    assert client.post("/api/v1/auth/logout", headers=evil).status_code == 403
    with_token = {**evil, "X-CSRF-Token": csrf_token(client)}
    assert client.post("/api/v1/submissions", json=body, headers=with_token).status_code == 202
    token = register(client)
    client.cookies.clear()
    assert client.post(
        "/api/v1/submissions", json=body, headers={**evil, **bearer(token)}
    ).status_code == 202  # fmt: skip


# --- rate limits ------------------------------------------------------------------------------


def test_login_is_rate_limited_per_email_and_per_ip(tmp_path: Path) -> None:
    with make_client(tmp_path, login_rate_limit=3) as client:
        wrong = {"email": "ada@example.org", "password": "wrong password"}
        for _ in range(3):
            assert client.post("/api/v1/auth/login", json=wrong).status_code == 401
        limited = client.post("/api/v1/auth/login", json=wrong)
        assert limited.status_code == 429
        assert 1 <= int(limited.headers["retry-after"]) <= 60
        assert "Too many attempts" in limited.json()["detail"]
        assert f"{limited.headers['retry-after']} second" in limited.json()["detail"]
    with make_client(tmp_path / "2", login_ip_rate_limit=3) as client:
        for n in range(3):  # different emails, one address
            other = {"email": f"user{n}@example.org", "password": "wrong password"}
            assert client.post("/api/v1/auth/login", json=other).status_code == 401
        fresh = {"email": "fresh@example.org", "password": "wrong password"}
        assert client.post("/api/v1/auth/login", json=fresh).status_code == 429
        page = client.post("/de/login", data={**fresh, "csrf_token": csrf_token(client)})
        assert page.status_code == 429 and "retry-after" in page.headers
        assert gettext("de", "Too many attempts. Please wait a minute and try again.") in page.text


def test_submissions_are_rate_limited_per_owner(tmp_path: Path) -> None:
    with make_client(tmp_path, submission_rate_limit=2) as client:
        body = {"exercise": EXERCISE, "code": "x"}
        assert client.post("/api/v1/submissions", json=body).status_code == 202
        assert client.post("/api/v1/submissions", json=body).status_code == 202
        limited = client.post("/api/v1/submissions", json=body)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        form = client.post(
            "/tr/lessons/gradient-accumulation/exercises/accumulate",
            data={"code": "x", "csrf_token": csrf_token(client)},
        )
        assert form.status_code == 429 and '<html lang="tr">' in form.text
        assert gettext("tr", "Too many attempts") in form.text
        with TestClient(client.app) as someone_else:
            assert someone_else.post("/api/v1/submissions", json=body).status_code == 202
