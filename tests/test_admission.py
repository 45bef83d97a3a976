"""Admission of submissions: the queue's depth, how many submissions one learner, one grader
token and one client address may have waiting at once, and the worker time they may use.
Refusals are 429/503 with Retry-After, as JSON to the API and as a page in the learner's
language to the form; nothing is stored."""

import sqlite3
import time

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from app.main import create_app
from gradlab import tokens
from gradlab.config import Settings
from gradlab.models import Job, JobStatus, Submission, SubmissionStatus, WorkerHeartbeat
from tests.conftest import csrf_token
from tests.pg import both_databases

EXERCISE = "gradient-accumulation/accumulate"
SUBMIT = "/api/v1/submissions"


def _client(settings: Settings, **overrides: object) -> TestClient:
    for name, value in overrides.items():
        setattr(settings, name, value)
    return TestClient(create_app(settings))


def _submit(client: TestClient, **headers: str) -> int:
    return client.post(
        SUBMIT, json={"exercise": EXERCISE, "code": "x"}, headers=headers
    ).status_code


@both_databases
def test_cookieless_submissions_from_one_address_are_refused_before_the_60th(
    settings: Settings,
) -> None:
    """A script without cookies is a new anonymous learner every time: the address counts."""
    with _client(settings, submission_rate_limit=1000) as client:
        statuses = []
        for _ in range(60):
            client.cookies.clear()
            statuses.append(_submit(client))
        cap = settings.max_pending_per_address
        assert statuses[:cap] == [202] * cap
        assert set(statuses[cap:]) == {429}
        client.cookies.clear()
        refused = client.post(SUBMIT, json={"exercise": EXERCISE, "code": "x"})
        assert refused.headers["retry-after"] == "10"
        assert f"at most {cap} at once" in refused.json()["detail"]
        # a grader token from the same address is not a learner: its own, larger cap
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            token = tokens.create(session=session, name="lms").token
        assert _submit(client, Authorization=f"Bearer {token}") == 202


def test_one_learner_has_a_few_submissions_waiting_at_once(settings: Settings) -> None:
    with _client(settings, max_pending_per_learner=3) as client:
        assert [_submit(client) for _ in range(5)] == [202, 202, 202, 429, 429]
        listed = client.get(SUBMIT).json()["items"]
        assert len(listed) == 3  # the refused ones were not stored


@both_databases
def test_a_full_queue_is_503_with_retry_after_for_everyone(settings: Settings) -> None:
    with _client(settings, max_queued_jobs=2) as client:
        assert _submit(client) == 202
        client.cookies.clear()
        assert _submit(client) == 202
        client.cookies.clear()
        full = client.post(SUBMIT, json={"exercise": EXERCISE, "code": "x"})
        assert full.status_code == 503 and full.headers["retry-after"] == "30"
        assert "queue is full" in full.json()["detail"]
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            token = tokens.create(session=session, name="ci").token
        batch = client.post(
            f"{SUBMIT}/batch",
            json={"items": [{"exercise": EXERCISE, "code": "x"}]},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert batch.status_code == 503


def _worker_alive(client: TestClient, worker_id: str, *, stopped: bool = False) -> None:
    now = time.time()
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        session.merge(
            WorkerHeartbeat(
                worker_id=worker_id, host="h", pid=1, slots=2, device="cpu", started_at=now,
                last_seen=now, stopped_at=now if stopped else None,
            )
        )  # fmt: skip
        session.commit()


@both_databases
def test_a_queue_longer_than_a_learner_waits_is_503_by_the_workers_own_pace(
    settings: Settings,
) -> None:
    """The wait is estimated from the database alone: learners' queued jobs x the mean lease
    time of the last jobs / the live workers. Past `max_queue_wait_s`, learners get 503."""
    with _client(settings, max_queue_wait_s=10) as client:
        _worker_alive(client, "one")
        for _ in range(4):  # the last jobs took 3 s each
            client.cookies.clear()
            done = client.post(SUBMIT, json={"exercise": EXERCISE, "code": "x"}).json()["id"]
            _ran(client, done, seconds=3, ago=100)
        statuses = []
        for _ in range(3):  # wait for the third: (2 queued + 1) x 3 s / 1 worker = 9 s
            client.cookies.clear()
            statuses.append(_submit(client))
        assert statuses == [202] * 3
        client.cookies.clear()
        busy = client.post(SUBMIT, json={"exercise": EXERCISE, "code": "x"})
        assert busy.status_code == 503, busy.text
        assert "would wait about 12 s for a worker (at most 10 s)" in busy.json()["detail"]
        assert busy.headers["retry-after"] == "2"  # drained to the limit at that pace
        # a grader's jobs share the workers fairly (gradlab/queue.py): not refused, not counted
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            token = tokens.create(session=session, name="lms").token
        assert [_submit(client, Authorization=f"Bearer {token}") for _ in range(3)] == [202] * 3
        _worker_alive(client, "two")  # (3 + 1) x 3 s / 2 workers = 6 s
        assert _submit(client) == 202
        _worker_alive(client, "one", stopped=True)
        _worker_alive(client, "two", stopped=True)  # nobody to estimate from: depth cap only
        client.cookies.clear()
        assert _submit(client) == 202


@pytest.mark.parametrize("locale", ["en", "de"])
def test_the_form_says_why_in_the_learners_language(settings: Settings, locale: str) -> None:
    with _client(settings, max_pending_per_learner=1) as client:
        assert _submit(client) == 202
        response = client.post(
            f"/{locale}/lessons/gradient-accumulation/exercises/accumulate",
            data={"code": "x", "csrf_token": csrf_token(client)},
            follow_redirects=False,
        )
        assert response.status_code == 429 and response.headers["retry-after"] == "10"
        expected = {"en": "You already have 1 submission waiting", "de": "Du hast bereits 1 Abgabe"}
        assert expected[locale] in response.text


def test_the_pages_script_gets_the_reason_and_words_it_in_the_pages_language(
    settings: Settings,
) -> None:
    """The exercise form asked for JSON (static/js/exercise.js): a refusal carries its status,
    Retry-After and `reason`, which the lesson page words in its own language."""
    with _client(settings, max_pending_per_learner=1) as client:
        assert _submit(client) == 202
        response = client.post(
            "/de/lessons/gradient-accumulation/exercises/accumulate",
            data={"code": "x", "csrf_token": csrf_token(client)},
            headers={"Accept": "application/json"},
        )
        assert response.status_code == 429 and response.headers["retry-after"] == "10"
        body = response.json()
        assert body["reason"] == "too_many_pending"
        assert "Du hast bereits 1 Abgabe" in body["message"]  # others, worded by the server
        page = client.get("/de/lessons/gradient-accumulation").text
        assert 'data-msg-pending="Deine früheren Abgaben warten noch auf ihre Bewertung."' in page
        assert 'data-msg-retry-seconds="Versuch es in {n} Sekunden noch einmal."' in page
        assert 'data-msg-busy="Der Server ist gerade stark ausgelastet."' in page


def test_draft_saves_are_limited_per_address(settings: Settings) -> None:
    with _client(settings, draft_rate_limit=5) as client:
        statuses = []
        for index in range(7):
            client.cookies.clear()  # a new anonymous learner (a new row) each time
            statuses.append(
                client.put(f"/api/v1/drafts/{EXERCISE}", json={"code": f"# {index}"}).status_code
            )
        assert statuses == [200] * 5 + [429] * 2


def _ran(client: TestClient, submission_id: str, *, seconds: float, ago: float) -> None:
    """As if the submission had been sent `ago` seconds back and a worker had then spent
    `seconds` on it (the lease times a worker writes); still running if that reaches now."""
    now = time.time()
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        submission = session.get(Submission, submission_id)
        job = session.exec(select(Job).where(Job.submission_id == submission_id)).one()
        assert submission is not None
        submission.created_at = job.started_at = now - ago
        if seconds < ago:
            submission.status, job.status = SubmissionStatus.failed, JobStatus.done
            job.finished_at = submission.finished_at = now - ago + seconds
        else:
            submission.status, job.status = SubmissionStatus.running, JobStatus.leased
        session.add_all([submission, job])
        session.commit()


@both_databases
def test_worker_time_is_budgeted_per_learner_and_per_address(settings: Settings) -> None:
    """Endless loops cost a worker its whole wall clock each: the seconds spent count, not only
    the number of submissions. A learner, then the learners at one address, run out."""
    budgets = {"worker_seconds_per_learner": 30, "worker_seconds_per_address": 50}
    with _client(settings, **budgets) as client:
        body = {"exercise": EXERCISE, "code": "while True: pass"}
        first = client.post(SUBMIT, json=body).json()["id"]
        _ran(client, first, seconds=31, ago=100)
        refused = client.post(SUBMIT, json=body)
        assert refused.status_code == 429
        assert "your submissions used 31 s of grading time" in refused.json()["detail"]
        # until the submission sent 100 s ago leaves the 600 s window
        assert 495 <= int(refused.headers["retry-after"]) <= 501
        client.cookies.clear()  # a new anonymous learner at the same address
        second = client.post(SUBMIT, json=body).json()["id"]
        _ran(client, second, seconds=20, ago=50)  # the address: 51 s of its 50
        client.cookies.clear()
        refused = client.post(SUBMIT, json=body)
        assert refused.status_code == 429
        assert "submissions from your address used 51 s" in refused.json()["detail"]
        # the German form says so too, and graders at that address have their own budget
        page = client.post(
            "/de/lessons/gradient-accumulation/exercises/accumulate",
            data={"code": "x", "csrf_token": csrf_token(client)},
            follow_redirects=False,
        )
        assert page.status_code == 429 and "51 Sekunden Bewertungszeit" in page.text
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            token = tokens.create(session=session, name="lms").token
        assert _submit(client, Authorization=f"Bearer {token}") == 202


def test_worker_time_counts_running_jobs_and_forgets_old_ones(settings: Settings) -> None:
    with _client(settings, worker_seconds_per_learner=30) as client:
        first = client.post(SUBMIT, json={"exercise": EXERCISE, "code": "x"}).json()["id"]
        _ran(client, first, seconds=45, ago=settings.worker_time_window_s + 1)
        second = client.post(SUBMIT, json={"exercise": EXERCISE, "code": "x"}).json()["id"]
        _ran(client, second, seconds=40, ago=40)  # running for 40 s now
        refused = client.post(SUBMIT, json={"exercise": EXERCISE, "code": "x"})
        assert refused.status_code == 429 and "used 40 s" in refused.json()["detail"]


def test_a_write_lock_held_elsewhere_is_a_quick_503_not_a_hang(settings: Settings) -> None:
    """SQLite has one write lock; a request waits `db_lock_wait_s` for it, then says 503 with
    Retry-After (a worker's write would wait longer: its result must land)."""
    with _client(settings, db_lock_wait_s=0.3) as client:
        assert _submit(client) == 202
        holder = sqlite3.connect(settings.data_dir / "gradlab.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process writing, for as long as it likes
        try:
            started = time.monotonic()
            busy = client.post(SUBMIT, json={"exercise": EXERCISE, "code": "x"})
            waited = time.monotonic() - started
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert busy.status_code == 503 and int(busy.headers["retry-after"]) >= 1
        assert waited < 10  # the default for workers, 30 s, would be far past this
        assert _submit(client) == 202  # and once the lock is free, all is well
