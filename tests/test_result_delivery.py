"""A result reaches the lesson page the moment it is stored: the page's script asks for the
result fragment with `wait`, and the server holds that request (without a database slot) until
the submission's status differs from the one the page shows."""

import threading
import time

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from app.routes import pages
from app.submissions import waiting
from gradlab import doorbell, queue
from gradlab.config import Settings
from gradlab.results import Check, GradeResult
from tests.conftest import csrf_token

EXERCISE = "gradient-accumulation/accumulate"


def _grade_later(client: TestClient, delay_s: float) -> threading.Thread:
    """A worker that claims the job after `delay_s` and stores a passing result."""

    def work() -> None:
        time.sleep(delay_s)
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            job = queue.claim(session=session, worker_id="test", lease_s=30, max_attempts=3)
            assert job is not None
            check = Check(id="runs", passed=True, points=1, max_points=1, message="")
            assert queue.finish(
                session=session,
                job_id=job.job_id,
                worker_id="test",
                result=GradeResult.from_checks([check]),
            )

    worker = threading.Thread(target=work)
    worker.start()
    return worker


def test_a_held_fragment_is_answered_when_the_status_changes(client: TestClient) -> None:
    sent = client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}).json()
    fragment = f"/en/submissions/{sent['id']}?fragment=1"
    first = client.get(fragment)
    assert first.headers["x-gradlab-status"] == "queued"
    # nothing changes: the held request ends after its wait, with the same status
    idle = client.get(f"{fragment}&wait=0.3&shown=queued")
    assert idle.status_code == 200 and idle.headers["x-gradlab-status"] == "queued"
    worker = _grade_later(client, delay_s=0.5)
    started = time.monotonic()
    statuses = []
    shown = "queued"
    while shown != "passed" and len(statuses) < 3:
        held = client.get(f"{fragment}&wait=30&shown={shown}")
        shown = held.headers["x-gradlab-status"]
        statuses.append(shown)
    took = time.monotonic() - started
    worker.join()
    assert statuses[-1] == "passed" and set(statuses) <= {"running", "passed"}, statuses
    assert "Result: Passed" in held.text
    assert took < 15, took  # answered when the result was stored, not at the end of its wait


def test_a_fragment_already_past_the_shown_status_is_answered_at_once(
    client: TestClient,
) -> None:
    sent = client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}).json()
    _grade_later(client, delay_s=0).join()
    started = time.monotonic()
    held = client.get(f"/en/submissions/{sent['id']}?fragment=1&wait=30&shown=queued")
    assert held.headers["x-gradlab-status"] == "passed"
    assert time.monotonic() - started < 15
    bad = client.get(f"/en/submissions/{sent['id']}?fragment=1&wait=600")
    assert bad.status_code == 422  # at most 30 s


# --- the lesson page's protocol: the form post, then looks held `until=done` ------------------

FORM = "/en/lessons/gradient-accumulation/exercises/accumulate"
MAX_LOOKS = 5  # a stuck protocol ends the test instead of looping


def _held(client: TestClient) -> None:
    """Until the app holds a look (a `?wait` request waiting for its submission)."""
    for _ in range(3000):
        if client.app.state.waiting.count > 0:  # type: ignore[attr-defined]
            return
        time.sleep(0.01)
    raise AssertionError("no look was held")


def _claim(client: TestClient) -> int:
    """A stand-in worker leases the job (the submission is "running")."""
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        job = queue.claim(session=session, worker_id="test", lease_s=30, max_attempts=3)
        assert job is not None
        return job.job_id


def _finish(client: TestClient, job_id: int, submission_id: str) -> None:
    """It stores a passing result and rings the web, as worker/main.py does."""
    check = Check(id="runs", passed=True, points=1, max_points=1, message="")
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        result = GradeResult.from_checks([check])
        assert queue.finish(session=session, job_id=job_id, worker_id="test", result=result)
    doorbell.ring(client.app.state.settings, doorbell.WEB, submission_id.encode())  # type: ignore[attr-defined]


def _post(client: TestClient) -> dict:  # type: ignore[type-arg]
    sent = client.post(
        FORM,
        data={"code": "x", "csrf_token": csrf_token(client)},
        headers={"Accept": "application/json"},
    )
    assert sent.status_code == 202, sent.text
    body = sent.json()
    # the fragment as it is comes with the answer: the page shows it without asking
    assert body["status"] == "queued" and 'data-status="queued"' in body["html"]
    return body


def _looks(client: TestClient, body: dict) -> list[str]:  # type: ignore[type-arg]
    """What static/js/exercise.js does after the post: held looks until a verdict."""
    shown, statuses = body["status"], []
    while shown in ("queued", "running") and len(statuses) < MAX_LOOKS:
        look = client.get(f"{body['fragment_url']}&wait=25&until=done&shown={shown}")
        assert look.status_code == 200
        shown = look.headers["x-gradlab-status"]
        statuses.append(shown)
    return statuses


def test_a_quick_grade_reaches_the_page_in_one_look_after_the_form_post(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """queued -> running -> passed while one look is held: that look brings the verdict."""
    monkeypatch.setattr(pages, "SHOW_RUNNING_AFTER_S", 3600)  # "quick", however slow the host
    reloads: list[str] = []
    reload = waiting._reload

    def spied(engine, submission_id):  # type: ignore[no-untyped-def]
        found = reload(engine, submission_id)
        reloads.append(found.status)
        return found

    monkeypatch.setattr(waiting, "_reload", spied)
    body = _post(client)

    def work() -> None:
        _held(client)
        job_id = _claim(client)
        for _ in range(3000):  # until the held look has seen it running
            if "running" in reloads:
                break
            time.sleep(0.01)
        _finish(client, job_id, body["id"])

    worker = threading.Thread(target=work)
    worker.start()
    statuses = _looks(client, body)
    worker.join()
    assert "running" in reloads  # the look saw the job run, and held on
    assert statuses == ["passed"]


def test_a_long_run_is_shown_running_once_then_the_verdict(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that keeps running comes back once as "running" (the page counts down its time
    left); the next look is held until the verdict: two looks in all."""
    monkeypatch.setattr(pages, "SHOW_RUNNING_AFTER_S", 0)
    body = _post(client)
    jobs: list[int] = []

    def work() -> None:
        _held(client)
        jobs.append(_claim(client))

    worker = threading.Thread(target=work)
    worker.start()
    first = client.get(f"{body['fragment_url']}&wait=25&until=done&shown=queued")
    worker.join()
    assert first.headers["x-gradlab-status"] == "running"
    assert "time-left" in first.text

    def finish() -> None:
        _held(client)
        _finish(client, jobs[0], body["id"])

    worker = threading.Thread(target=finish)
    worker.start()
    statuses = _looks(client, {**body, "status": "running"})
    worker.join()
    assert statuses == ["passed"]


def test_a_stored_result_rings_the_held_look(client: TestClient) -> None:
    """With the poll interval far beyond the look's wait, only the worker's ring can answer
    the held look before its wait ends."""
    client.app.state.settings.poll_interval_s = 600  # type: ignore[attr-defined]
    body = _post(client)
    job_id = _claim(client)

    def finish() -> None:
        _held(client)
        _finish(client, job_id, body["id"])

    worker = threading.Thread(target=finish)
    worker.start()
    started = time.monotonic()
    look = client.get(f"{body['fragment_url']}&wait=30&shown=running")
    took = time.monotonic() - started
    worker.join()
    assert look.headers["x-gradlab-status"] == "passed"
    assert took < 15, took  # the ring answered it: the first poll would come at the end of its wait


def test_doorbells_ring_their_role_and_forget_the_dead(settings: Settings) -> None:
    worker = doorbell.Doorbell(settings, doorbell.WORKER)
    web = doorbell.Doorbell(settings, doorbell.WEB)
    dead = doorbell.Doorbell(settings, doorbell.WEB)
    assert dead.sock is not None and dead.path is not None
    dead.sock.close()  # a process that died: its socket file is left behind
    try:
        assert doorbell.ring(settings, doorbell.WEB, b"abc") == 1
        assert not dead.path.exists()
        assert web.wait(30) == [b"abc"]
        assert worker.drain() == []  # the other role was not rung
        assert doorbell.ring(settings, doorbell.WORKER) == 1
        assert worker.wait(30) == [b""]
    finally:
        worker.close()
        web.close()
    assert doorbell.ring(settings, doorbell.WEB) == 0
