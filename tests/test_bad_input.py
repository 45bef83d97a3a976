"""Bad input at the edges: text no database can store, oversized bodies, oversized code from the
no-JavaScript form. Each gets a clear 4xx (in the page's language on a page), never a 500, and
nothing is stored. Run on SQLite and PostgreSQL: PostgreSQL is the stricter store (no NUL)."""

import socket
import time
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import Content
from tests.conftest import csrf_token
from tests.pg import both_databases
from worker.grading import grade

EXERCISE = "gradient-accumulation/accumulate"
SUBMIT = "/api/v1/submissions"
DRAFT = f"/api/v1/drafts/{EXERCISE}"
JSON = {"content-type": "application/json"}


def _submissions(client: TestClient) -> list[dict]:
    response = client.get(SUBMIT)
    assert response.status_code == 200, response.text
    return response.json()["items"]


@both_databases
@pytest.mark.parametrize(
    "body",
    [
        b'{"exercise": "%s", "code": "x = 1\\n# \\ud800"}' % EXERCISE.encode(),
        b'{"exercise": "%s", "code": "\\udfff"}' % EXERCISE.encode(),  # a low half alone
        b'{"exercise": "%s", "code": "\\ud83d\\u0041"}' % EXERCISE.encode(),  # no low half
        b'{"exercise": "\\ud800", "code": "x"}',  # in another field
        b'{"exercise": "%s", "code": "x", "\\ud800": 1}' % EXERCISE.encode(),  # in a key
    ],
    ids=["in-code", "low-half", "unpaired-high", "in-exercise", "in-key"],
)
def test_lone_surrogates_are_refused_with_422_and_nothing_is_stored(
    client: TestClient, body: bytes
) -> None:
    for method, path in (("POST", SUBMIT), ("PUT", DRAFT)):
        response = client.request(method, path, content=body, headers=JSON)
        assert response.status_code == 422, (path, response.text)
        (problem,) = response.json()["detail"]
        assert problem["type"] == "unicode_invalid" and "surrogate" in problem["msg"]
    assert _submissions(client) == []
    assert client.get(DRAFT).json()["code"] is None


@both_databases
def test_surrogate_pairs_and_escaped_backslashes_are_ordinary_text(client: TestClient) -> None:
    code = "print('\\ud83d\\ude00')  # \\\\ud800 is six characters here\\n"  # JSON text
    body = b'{"exercise": "%s", "code": "%s"}' % (EXERCISE.encode(), code.encode())
    response = client.post(SUBMIT, content=body, headers=JSON)
    assert response.status_code == 202, response.text
    (stored,) = _submissions(client)
    assert stored["id"] == response.json()["id"]
    assert client.put(DRAFT, content=body, headers=JSON).status_code == 200
    assert "\U0001f600" in client.get(DRAFT).json()["code"]


@both_databases
def test_a_nul_character_in_code_is_refused_with_its_line(client: TestClient) -> None:
    code = "x = 1\ny = '\0'\n"
    response = client.post(SUBMIT, json={"exercise": EXERCISE, "code": code})
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == "code contains a NUL character (\\x00) at line 2, column 6"
    draft = client.put(DRAFT, json={"code": code})
    assert draft.status_code == 422 and "line 2" in draft.json()["detail"]
    batch = client.post(
        f"{SUBMIT}/batch", json={"items": [{"exercise": EXERCISE, "code": code}]}
    )  # no grader token: refused before the code is looked at
    assert batch.status_code in (401, 403)
    assert _submissions(client) == []


def test_a_nul_character_that_reaches_the_worker_is_a_syntax_error(
    content: Content, tmp_path
) -> None:
    """A job stored before the check existed: the learner hears where, not "internal error"."""
    settings = Settings(data_dir=tmp_path, content_dir=PROJECT_ROOT / "lessons")
    result = grade(
        content=content, settings=settings, exercise=EXERCISE, code="x = 1\n\0\n", locale="en"
    )
    assert result.status == "error" and result.error is not None, result
    assert result.error.kind == "syntax_error", result.error
    assert result.error.line == 2 and "null bytes" in result.error.message


def test_bodies_over_the_cap_are_refused_before_they_are_read(
    client: TestClient, settings: Settings
) -> None:
    cap = settings.max_body_bytes
    declared = client.post(
        SUBMIT, content=b"x" * (cap + 1), headers={**JSON, "content-length": str(cap + 1)}
    )
    assert declared.status_code == 413 and str(cap) in declared.json()["detail"]

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(cap // 65536 + 2):
            yield b" " * 65536

    streamed = client.post(SUBMIT, content=chunks(), headers=JSON)
    assert streamed.status_code == 413
    # the batch endpoint has its own, larger cap: a body over the default one is read
    batch_body = b'{"items": []' + b" " * (cap + 10) + b"}"
    batch = client.post(f"{SUBMIT}/batch", content=batch_body, headers=JSON)
    assert batch.status_code in (401, 403)  # it reached the route
    assert _submissions(client) == []


def test_a_live_server_answers_413_without_reading_a_huge_body(server: str) -> None:
    """Sends the headers of a 400 MB post and 1 MB of it: the answer comes at once, while the
    rest is never sent (a server that buffered first would wait for it)."""
    parts = urlsplit(server)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as connection:
        connection.sendall(
            b"POST /api/v1/submissions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 400000000\r\n\r\n" + b" " * 1_000_000
        )
        started = time.monotonic()
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = connection.recv(65536)
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("locale", "title"),
    [("en", "Your code was not sent"), ("de", None), ("es", None), ("tr", None)],
)
def test_the_form_refuses_oversized_code_with_a_page_in_its_language(
    client: TestClient, settings: Settings, locale: str, title: str | None
) -> None:
    code = "#" * (settings.max_code_bytes + 1)
    response = client.post(
        f"/{locale}/lessons/gradient-accumulation/exercises/accumulate",
        data={"code": code, "csrf_token": csrf_token(client)},
        follow_redirects=False,
    )
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("text/html")
    assert f'<html lang="{locale}"' in response.text
    if title is not None:
        assert title in response.text
    else:  # translated: the English wording is nowhere on the page
        assert "Your code was not sent" not in response.text
        assert "bytes; the limit is" not in response.text
    assert _submissions(client) == []
    asked_json = client.post(
        f"/{locale}/lessons/gradient-accumulation/exercises/accumulate",
        data={"code": "x\0", "csrf_token": csrf_token(client)},
        headers={"accept": "application/json"},
    )
    assert asked_json.status_code == 422 and "NUL" in asked_json.json()["detail"]
