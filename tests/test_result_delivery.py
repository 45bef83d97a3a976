"""A result reaches the lesson page the moment it is stored: the page's script asks for the
result fragment with `wait`, and the server holds that request (without a database slot) until
the submission's status differs from the one the page shows."""

import threading
import time

from fastapi.testclient import TestClient
from sqlmodel import Session

from gradlab import queue
from gradlab.results import Check, GradeResult

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
