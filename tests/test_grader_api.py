"""The grader-facing API: tokens (CLI), auth, listing, batch, idempotency, signed webhooks."""

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, func, select

from gradlab import queue, tokens, webhooks
from gradlab.config import PROJECT_ROOT, Settings
from gradlab.models import IdempotencyKey, Job, Submission, WebhookDelivery
from gradlab.results import Check, GradeResult
from tests.pg import both_databases

EXERCISE = "gradient-accumulation/accumulate"
OTHER_EXERCISE = "gradient-accumulation/last-partial-cycle"
CORPUS = Path(__file__).parent / "corpus" / "accumulate"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Webhooks to 127.0.0.1 (the test receiver), fast retries."""
    return settings.model_copy(
        update={
            "webhook_allow_private": True,
            "webhook_backoff_s": 0.2,
            "webhook_poll_s": 0.05,
            "webhook_timeout_s": 2.0,
            "webhook_max_attempts": 4,
        }
    )


def _token(client: TestClient, name: str = "ci") -> tokens.NewToken:
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        return tokens.create(session=session, name=name)


def _auth(token: tokens.NewToken) -> dict[str, str]:
    return {"Authorization": f"Bearer {token.token}"}


def _count(client: TestClient, model: type) -> int:
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        return session.exec(select(func.count()).select_from(model)).one()


def _finish(engine, status: str = "passed") -> str:  # type: ignore[no-untyped-def]
    """Grade the oldest queued job without a sandbox (where the sandbox is not the point)."""
    with Session(engine) as session:
        job = queue.claim(session=session, worker_id="test", lease_s=30, max_attempts=3)
        assert job is not None
        check = Check(id="runs", passed=status == "passed", points=1, max_points=1, message="")
        assert queue.finish(
            session=session,
            job_id=job.job_id,
            worker_id="test",
            result=GradeResult.from_checks([check], locale=job.locale),
        )
        return job.submission_id


# --- tokens -------------------------------------------------------------------------------


def _gradlab(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradlab.cli", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GRADLAB_DATA_DIR": str(data_dir)},
    )


def test_token_create_list_revoke_via_the_cli(tmp_path: Path) -> None:
    from app.main import create_app

    data_dir = tmp_path / "data"
    created = _gradlab("token", "create", "moodle", data_dir=data_dir)
    assert created.returncode == 0, created.stderr
    lines = created.stdout.strip().splitlines()
    token = lines[-1]
    assert token.startswith("glg_") and " " not in token and len(token) > 40
    assert "whsec_" in created.stdout and "grader:1" in created.stdout
    assert _gradlab("token", "create", "moodle", data_dir=data_dir).returncode == 2  # taken

    listed = _gradlab("token", "list", data_dir=data_dir)
    assert listed.returncode == 0 and "moodle" in listed.stdout
    assert token[:10] in listed.stdout and token not in listed.stdout  # only a prefix

    settings = Settings(data_dir=data_dir, secret_key="test-secret")
    with TestClient(create_app(settings)) as client:
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            stored = tokens.list_tokens(session=session)[0]
        assert stored.token_hash == tokens.token_hash(token) and token not in stored.token_hash
        headers = {"Authorization": f"Bearer {token}"}
        made = client.post(
            "/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}, headers=headers
        )
        assert made.status_code == 202, made.text
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            assert session.get(Submission, made.json()["id"]).owner == "grader:1"  # type: ignore[union-attr]

        revoked = _gradlab("token", "revoke", "moodle", data_dir=data_dir)
        assert revoked.returncode == 0, revoked.stderr
        refused = client.get(made.json()["url"], headers=headers)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith(
            "Bearer"
        )
    assert _gradlab("token", "revoke", "1", data_dir=data_dir).returncode == 2  # already
    assert _gradlab("token", "revoke", "nobody", data_dir=data_dir).returncode == 2
    again = _gradlab("token", "create", "moodle", data_dir=data_dir)  # the name is free again
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] != token
    assert "revoked" in _gradlab("token", "list", data_dir=data_dir).stdout.splitlines()[0]


# --- auth ---------------------------------------------------------------------------------


@both_databases
def test_auth_failures_and_the_two_kinds_of_tokens(client: TestClient) -> None:
    body = {"exercise": EXERCISE, "code": "x"}
    for header in ("Bearer glg_unknown", "Bearer ", "Basic Zm9vOmJhcg==", "Bearer gls_nope"):
        refused = client.post("/api/v1/submissions", json=body, headers={"Authorization": header})
        assert refused.status_code == 401, header
        assert refused.headers["www-authenticate"].startswith("Bearer")

    batch = {"items": [body]}
    anonymous = client.post("/api/v1/submissions/batch", json=batch)
    assert anonymous.status_code == 401 and "www-authenticate" in anonymous.headers

    client.post("/api/v1/auth/register", json={"email": "a@example.org", "password": "pw-123456"})
    login = client.post(
        "/api/v1/auth/login", json={"email": "a@example.org", "password": "pw-123456"}
    )
    account = login.json()["access_token"]
    assert account.startswith("gls_")
    as_account = {"Authorization": f"Bearer {account}"}
    assert (
        client.post("/api/v1/submissions/batch", json=batch, headers=as_account).status_code == 403
    )
    with_callback = {**body, "callback_url": "http://127.0.0.1:9/hook"}
    assert (
        client.post("/api/v1/submissions", json=with_callback, headers=as_account).status_code
        == 403
    )
    client.cookies.clear()
    assert client.post("/api/v1/submissions", json=with_callback).status_code == 403  # learner

    grader = _token(client)
    as_grader = _auth(grader)
    assert client.get("/api/v1/auth/me", headers=as_grader).status_code == 403
    # a grader token is never looked up as an account token, nor the reverse
    swapped = {"Authorization": f"Bearer gls_{grader.token[4:]}"}
    assert client.get("/api/v1/submissions", headers=swapped).status_code == 401
    swapped = {"Authorization": f"Bearer glg_{account[4:]}"}
    assert client.get("/api/v1/submissions", headers=swapped).status_code == 401
    assert (
        client.post("/api/v1/submissions/batch", json=batch, headers=as_grader).status_code == 202
    )


@both_databases
def test_submissions_are_visible_to_their_owner_only(client: TestClient) -> None:
    first, second = _auth(_token(client, "a")), _auth(_token(client, "b"))
    made = client.post(
        "/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}, headers=first
    ).json()
    assert client.get(made["url"], headers=first).status_code == 200
    assert client.get(made["url"], headers=second).status_code == 404
    assert client.get(made["url"]).status_code == 404  # the cookie learner
    assert client.get(f"{made['url']}/deliveries", headers=second).status_code == 404
    assert client.get(f"{made['url']}/deliveries", headers=first).json() == {"items": []}
    assert client.get("/api/v1/submissions", headers=second).json()["items"] == []


# --- listing ------------------------------------------------------------------------------


@both_databases
def test_listing_pages_newest_first_with_a_stable_cursor(client: TestClient) -> None:
    headers = _auth(_token(client))
    made = []
    for index in range(7):
        exercise = EXERCISE if index % 2 == 0 else OTHER_EXERCISE
        response = client.post(
            "/api/v1/submissions", json={"exercise": exercise, "code": f"#{index}"}, headers=headers
        )
        made.append(response.json()["id"])

    seen: list[dict] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/api/v1/submissions", params=params, headers=headers)
        assert page.status_code == 200, page.text
        body = page.json()
        seen += body["items"]
        pages += 1
        if pages == 1:  # a submission arriving meanwhile does not shift later pages
            client.post(
                "/api/v1/submissions", json={"exercise": EXERCISE, "code": "late"}, headers=headers
            )
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and [s["id"] for s in seen] == made[::-1]
    keys = [(s["created_at"], s["id"]) for s in seen]
    assert keys == sorted(keys, reverse=True)

    only = client.get("/api/v1/submissions", params={"exercise": OTHER_EXERCISE}, headers=headers)
    assert [s["id"] for s in only.json()["items"]] == made[1::2][::-1]

    graded = _finish(client.app.state.engine)  # type: ignore[attr-defined]
    passed = client.get("/api/v1/submissions", params={"status": "passed"}, headers=headers)
    assert [s["id"] for s in passed.json()["items"]] == [graded]
    assert passed.json()["items"][0]["result"]["status"] == "passed"

    for bad in ("!!!", "bm90IGpzb24", "WzEsMl0"):  # not base64, not JSON, wrong types
        refused = client.get("/api/v1/submissions", params={"cursor": bad}, headers=headers)
        assert refused.status_code == 422, bad
    assert client.get("/api/v1/submissions?limit=0", headers=headers).status_code == 422
    assert client.get("/api/v1/submissions?limit=101", headers=headers).status_code == 422
    assert client.get("/api/v1/submissions?status=nope", headers=headers).status_code == 422


# --- batch --------------------------------------------------------------------------------


@both_databases
def test_batch_keeps_order_and_is_all_or_nothing(client: TestClient, settings: Settings) -> None:
    headers = _auth(_token(client))
    items = [
        {"exercise": EXERCISE, "code": "#0"},
        {"exercise": OTHER_EXERCISE, "code": "#1", "locale": "de"},
        {"exercise": EXERCISE, "code": "#2"},
    ]
    response = client.post("/api/v1/submissions/batch", json={"items": items}, headers=headers)
    assert response.status_code == 202, response.text
    made = response.json()["items"]
    assert [s["exercise"] for s in made] == [i["exercise"] for i in items]
    assert made[1]["locale"] == "de" and all(s["status"] == "queued" for s in made)
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        assert [session.get(Submission, s["id"]).code for s in made] == ["#0", "#1", "#2"]  # type: ignore[union-attr]
    before = _count(client, Submission)

    too_many = {"items": [{"exercise": EXERCISE, "code": "x"}] * 101}
    refused = client.post("/api/v1/submissions/batch", json=too_many, headers=headers)
    assert refused.status_code == 422 and "100" in json.dumps(refused.json())
    assert (
        client.post("/api/v1/submissions/batch", json={"items": []}, headers=headers).status_code
        == 422
    )

    bad = [*items, {"exercise": "nope/nope", "code": "x"}]
    refused = client.post("/api/v1/submissions/batch", json={"items": bad}, headers=headers)
    assert refused.status_code == 404 and "items[3]" in refused.json()["detail"]
    big = [{"exercise": EXERCISE, "code": "#" * (settings.max_code_bytes + 1)}, *items]
    refused = client.post("/api/v1/submissions/batch", json={"items": big}, headers=headers)
    assert refused.status_code == 413 and "items[0]" in refused.json()["detail"]
    private = [*items, {"exercise": EXERCISE, "code": "x", "callback_url": "ftp://x.org/"}]
    refused = client.post("/api/v1/submissions/batch", json={"items": private}, headers=headers)
    assert refused.status_code == 422 and "items[3]" in refused.json()["detail"]
    assert _count(client, Submission) == before  # nothing of a refused batch was stored

    hundred = {"items": [{"exercise": EXERCISE, "code": f"#{i}"} for i in range(100)]}
    assert (
        client.post("/api/v1/submissions/batch", json=hundred, headers=headers).status_code == 202
    )


def test_batch_items_count_against_the_rate_limit(settings: Settings) -> None:
    from app.main import create_app

    with TestClient(create_app(settings.model_copy(update={"grader_rate_limit": 5}))) as client:
        headers = _auth(_token(client))
        four = {"items": [{"exercise": EXERCISE, "code": "x"}] * 4}
        assert (
            client.post("/api/v1/submissions/batch", json=four, headers=headers).status_code == 202
        )
        limited = client.post("/api/v1/submissions/batch", json=four, headers=headers)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        one = {"exercise": EXERCISE, "code": "x"}
        assert client.post("/api/v1/submissions", json=one, headers=headers).status_code == 202
        limited = client.post("/api/v1/submissions", json=one, headers=headers)
        assert limited.status_code == 429 and "retry-after" in limited.headers


# --- idempotency --------------------------------------------------------------------------


@both_databases
def test_idempotency_key_returns_the_same_submission_and_enqueues_once(
    client: TestClient,
) -> None:
    grader = _token(client)
    headers = {**_auth(grader), "Idempotency-Key": "7c3e-retry-1"}
    body = {"exercise": EXERCISE, "code": "print(1)"}
    first = client.post("/api/v1/submissions", json=body, headers=headers)
    again = client.post("/api/v1/submissions", json=body, headers=headers)
    assert first.status_code == 202 and again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert _count(client, Submission) == 1 and _count(client, Job) == 1

    changed = client.post("/api/v1/submissions", json={**body, "code": "print(2)"}, headers=headers)
    assert changed.status_code == 409 and "Idempotency-Key" in changed.json()["detail"]

    other = {**_auth(_token(client, "other")), "Idempotency-Key": "7c3e-retry-1"}
    theirs = client.post("/api/v1/submissions", json=body, headers=other)
    assert theirs.status_code == 202 and theirs.json()["id"] != first.json()["id"]  # per owner

    _finish(client.app.state.engine)  # type: ignore[attr-defined]
    done = client.post("/api/v1/submissions", json=body, headers=headers)
    assert done.status_code == 200 and done.json()["result"]["status"] == "passed"

    batch_headers = {**_auth(grader), "Idempotency-Key": "batch-1"}
    items = {"items": [body, {**body, "code": "print(3)"}]}
    one = client.post("/api/v1/submissions/batch", json=items, headers=batch_headers)
    two = client.post("/api/v1/submissions/batch", json=items, headers=batch_headers)
    assert [s["id"] for s in one.json()["items"]] == [s["id"] for s in two.json()["items"]]
    assert _count(client, Job) == 4

    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        for row in session.exec(select(IdempotencyKey)).all():
            row.expires_at = time.time() - 1
            session.add(row)
        session.commit()
    expired = client.post("/api/v1/submissions", json=body, headers=headers)
    assert expired.status_code == 202 and expired.json()["id"] != first.json()["id"]
    assert (
        client.post(
            "/api/v1/submissions", json=body, headers={**headers, "Idempotency-Key": "k" * 256}
        ).status_code
        == 422
    )


def test_concurrent_requests_with_one_key_enqueue_once(client: TestClient) -> None:
    headers = {**_auth(_token(client)), "Idempotency-Key": "race"}
    body = {"exercise": EXERCISE, "code": "x"}
    ids: list[str] = []

    def post() -> None:
        response = client.post("/api/v1/submissions", json=body, headers=headers)
        assert response.status_code == 202, response.text
        ids.append(response.json()["id"])

    threads = [threading.Thread(target=post) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 1 and _count(client, Job) == 1


# --- webhooks -----------------------------------------------------------------------------


class Receiver:
    """A tiny HTTP server on 127.0.0.1 that records every request and answers from a script."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.requests: list[tuple[float, dict[str, str], bytes]] = []
        self.statuses = list(statuses or [])
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((time.time(), dict(self.headers), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook?course=dl"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def dispatcher(client: TestClient, settings: Settings) -> Iterator[webhooks.Dispatcher]:
    running = webhooks.Dispatcher(client.app.state.engine, settings).start()  # type: ignore[attr-defined]
    yield running
    running.stop(timeout_s=10)


def _wait_until(condition, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_webhook_end_to_end_signed_and_retried_with_backoff(
    client: TestClient, settings: Settings
) -> None:
    """Graded by the real worker and sandbox; the receiver fails twice, then takes it."""
    from worker.main import run_worker

    grader = _token(client)
    with Receiver(statuses=[500, 503]) as receiver:
        made = client.post(
            "/api/v1/submissions",
            json={
                "exercise": EXERCISE,
                "code": (CORPUS / "unscaled.py").read_text(),
                "locale": "de",
                "callback_url": receiver.url,
            },
            headers=_auth(grader),
        ).json()
        worker_settings = settings.model_copy(update={"webhook_dispatch": False})
        graded = threading.Thread(
            target=run_worker, kwargs={"settings": worker_settings, "max_jobs": 1}
        )
        graded.start()
        graded.join(timeout=300)
        assert not graded.is_alive()
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            assert session.exec(select(WebhookDelivery)).one().status == "pending"  # the outbox

        dispatcher = webhooks.Dispatcher(client.app.state.engine, settings).start()  # type: ignore[attr-defined]
        try:
            _wait_until(lambda: len(receiver.requests) == 3)
            _wait_until(
                lambda: (
                    client.get(f"{made['url']}/deliveries", headers=_auth(grader)).json()["items"][
                        0
                    ]["status"]
                    == "delivered"
                )
            )
        finally:
            dispatcher.stop(timeout_s=10)

    times = [t for t, _, _ in receiver.requests]
    assert times[1] - times[0] >= 0.2 and times[2] - times[1] >= 0.4  # doubling backoff
    delivery_ids = set()
    for number, (_, headers, body) in enumerate(receiver.requests, start=1):
        timestamp = headers["X-Gradlab-Timestamp"]
        assert webhooks.verify(
            grader.webhook_secret, timestamp, body, headers["X-Gradlab-Signature"]
        )
        assert not webhooks.verify("whsec_wrong", timestamp, body, headers["X-Gradlab-Signature"])
        assert not webhooks.verify(
            grader.webhook_secret, timestamp, body + b" ", headers["X-Gradlab-Signature"]
        )
        assert headers["X-Gradlab-Attempt"] == str(number)
        assert headers["Content-Type"] == "application/json"
        delivery_ids.add(headers["X-Gradlab-Delivery"])
    assert len(delivery_ids) == 1  # receivers deduplicate on it
    payload = json.loads(receiver.requests[-1][2])
    assert payload["event"] == "submission.finished"
    assert payload["submission"]["id"] == made["id"]
    assert payload["submission"]["result"]["diagnosis"]["code"] == "loss_not_scaled"
    assert payload["submission"]["result"]["locale"] == "de"

    log = client.get(f"{made['url']}/deliveries", headers=_auth(grader)).json()["items"]
    assert len(log) == 1 and log[0]["attempts"] == 3 and log[0]["url"] == receiver.url
    assert [a["status_code"] for a in log[0]["log"]] == [500, 503, 200]
    assert [a["attempt"] for a in log[0]["log"]] == [1, 2, 3]
    assert log[0]["delivered_at"] is not None and log[0]["id"] in delivery_ids


@both_databases
def test_webhook_gives_up_after_max_attempts(
    client: TestClient, settings: Settings, dispatcher: webhooks.Dispatcher
) -> None:
    grader = _token(client)
    with Receiver(statuses=[500] * 10) as receiver:
        made = client.post(
            "/api/v1/submissions",
            json={"exercise": EXERCISE, "code": "x", "callback_url": receiver.url},
            headers=_auth(grader),
        ).json()
        _finish(client.app.state.engine, "failed")  # type: ignore[attr-defined]

        def failed() -> bool:
            items = client.get(f"{made['url']}/deliveries", headers=_auth(grader)).json()["items"]
            return bool(items) and items[0]["status"] == "failed"

        _wait_until(failed)
    assert len(receiver.requests) == settings.webhook_max_attempts
    log = client.get(f"{made['url']}/deliveries", headers=_auth(grader)).json()["items"][0]
    assert log["attempts"] == settings.webhook_max_attempts and log["last_error"] == "HTTP 500"


def test_webhook_timeouts_and_refused_connections_are_logged_and_retried(
    client: TestClient, settings: Settings, dispatcher: webhooks.Dispatcher
) -> None:
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nobody listens here once closed
    grader = _token(client)
    made = client.post(
        "/api/v1/submissions",
        json={"exercise": EXERCISE, "code": "x", "callback_url": f"http://127.0.0.1:{port}/"},
        headers=_auth(grader),
    ).json()
    _finish(client.app.state.engine)  # type: ignore[attr-defined]

    def attempts() -> list[dict]:
        items = client.get(f"{made['url']}/deliveries", headers=_auth(grader)).json()["items"]
        return items[0]["log"] if items else []

    _wait_until(lambda: len(attempts()) >= 2)
    assert all(a["status_code"] is None and a["error"] for a in attempts())


def test_several_dispatchers_never_deliver_one_row_twice(
    client: TestClient, settings: Settings
) -> None:
    grader = _token(client)
    engine = client.app.state.engine  # type: ignore[attr-defined]
    with Receiver() as receiver:
        for index in range(12):
            client.post(
                "/api/v1/submissions",
                json={"exercise": EXERCISE, "code": f"#{index}", "callback_url": receiver.url},
                headers=_auth(grader),
            )
            _finish(engine)
        dispatchers = [webhooks.Dispatcher(engine, settings, threads=3).start() for _ in range(3)]
        try:
            _wait_until(lambda: len(receiver.requests) >= 12)
            time.sleep(0.5)  # would a second copy arrive?
        finally:
            for running in dispatchers:
                running.stop(timeout_s=10)
    ids = [headers["X-Gradlab-Delivery"] for _, headers, _ in receiver.requests]
    assert len(ids) == 12 and len(set(ids)) == 12


def test_a_revoked_token_stops_its_deliveries(
    client: TestClient, settings: Settings, dispatcher: webhooks.Dispatcher
) -> None:
    grader = _token(client)
    with Receiver() as receiver:
        made = client.post(
            "/api/v1/submissions",
            json={"exercise": EXERCISE, "code": "x", "callback_url": receiver.url},
            headers=_auth(grader),
        ).json()
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            tokens.revoke(session=session, name_or_id=grader.name)
        _finish(client.app.state.engine)  # type: ignore[attr-defined]

        def status() -> str | None:
            with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
                row = session.exec(
                    select(WebhookDelivery).where(WebhookDelivery.submission_id == made["id"])
                ).first()
                return row.status if row else None

        _wait_until(lambda: status() == "failed")
    assert receiver.requests == []


# --- SSRF ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.org/hook",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "http://127.0.0.1:8000/",
        "http://[::1]/",
        "http://10.1.2.3/",
        "http://192.168.0.10/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0/",
        "http://localhost/",
        "http://metadata.google.internal/",
        "http://user:pw@example.org/",
        "https://example.org:99999/",
        "http://exa mple.org/",
        "/relative",
        "https://" + "a" * 2050 + ".org/",
    ],
)
def test_callback_url_policy_refuses(url: str) -> None:
    with pytest.raises(webhooks.CallbackUrlError):
        webhooks.check_callback_url(url, allow_private=False)


def test_callback_url_policy_accepts_public_urls_and_loopback_when_allowed() -> None:
    for url in ("https://lms.example.edu/hooks/gradlab?x=1", "http://93.184.216.34:8080/h"):
        assert webhooks.check_callback_url(url, allow_private=False) == url
    assert webhooks.check_callback_url("http://127.0.0.1:9/", allow_private=True)


def test_delivery_refuses_a_name_that_resolves_to_a_private_address() -> None:
    outcome = webhooks.post(
        "http://localhost:9/", b"{}", {}, timeout_s=1, allow_private=False
    )  # a public-looking name could resolve like this too (DNS rebinding): checked at connect
    assert outcome.permanent and "non-public" in (outcome.error or "")


def test_api_refuses_private_callbacks_by_default(tmp_path: Path) -> None:
    from app.main import create_app

    settings = Settings(data_dir=tmp_path / "data", secret_key="test-secret")
    with TestClient(create_app(settings)) as client:
        headers = _auth(_token(client))
        refused = client.post(
            "/api/v1/submissions",
            json={"exercise": EXERCISE, "code": "x", "callback_url": "http://127.0.0.1:1/"},
            headers=headers,
        )
        assert refused.status_code == 422 and "public" in refused.json()["detail"]


def test_signature_is_over_timestamp_and_body() -> None:
    body = b'{"event":"submission.finished"}'
    now = int(time.time())
    signature = webhooks.sign("whsec_x", now, body)
    assert signature.startswith("sha256=") and len(signature) == 7 + 64
    assert webhooks.verify("whsec_x", str(now), body, signature)
    assert not webhooks.verify("whsec_x", str(now + 1), body, signature)  # timestamp is signed
    old = now - 3600
    assert not webhooks.verify("whsec_x", str(old), body, webhooks.sign("whsec_x", old, body))
