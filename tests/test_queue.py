"""The job queue on a real SQLite file and on PostgreSQL: atomic claims, leases, finishing
once, dead jobs; on PostgreSQL, claims skip rows another transaction holds (SKIP LOCKED)."""

import threading
import time

import pytest
from sqlalchemy import text
from sqlmodel import Session

from gradlab import queue
from gradlab.config import Settings
from gradlab.db import init_db, make_engine
from gradlab.models import Job, JobStatus, Submission
from gradlab.results import Check, GradeResult
from tests.pg import both_databases, postgresql_only


@pytest.fixture
def engine(settings: Settings):  # type: ignore[no-untyped-def]
    engine = make_engine(settings)
    init_db(engine)
    yield engine
    engine.dispose()


def _enqueue(engine, n: int = 1) -> list[str]:  # type: ignore[no-untyped-def]
    with Session(engine) as session:
        return [
            queue.enqueue(
                session=session, exercise="l/e", code=f"# {i}", locale="en", owner="learner:a"
            ).id
            for i in range(n)
        ]


def _claim(engine, worker: str, lease_s: float = 30, max_attempts: int = 3):  # type: ignore[no-untyped-def]
    with Session(engine) as session:
        return queue.claim(
            session=session, worker_id=worker, lease_s=lease_s, max_attempts=max_attempts
        )


def _result() -> GradeResult:
    return GradeResult.from_checks([Check(id="x", passed=True, points=1, max_points=1, message="")])


@both_databases
def test_claim_returns_oldest_job_and_marks_submission_running(engine) -> None:  # type: ignore[no-untyped-def]
    first, second = _enqueue(engine, 2)
    job = _claim(engine, "w1")
    assert job is not None and job.submission_id == first and job.attempts == 1
    assert job.code == "# 0"
    with Session(engine) as session:
        assert session.get(Submission, first).status == "running"
        assert session.get(Submission, second).status == "queued"
    assert _claim(engine, "w2").submission_id == second
    assert _claim(engine, "w3") is None


@both_databases
def test_concurrent_claims_never_share_a_job(engine) -> None:  # type: ignore[no-untyped-def]
    _enqueue(engine, 40)
    claimed: list[str] = []
    lock = threading.Lock()

    def claimer(name: str) -> None:
        while (job := _claim(engine, name)) is not None:
            with lock:
                claimed.append(job.submission_id)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(claimed) == 40 and len(set(claimed)) == 40


@both_databases
def test_finish_writes_result_once_and_only_for_the_lease_holder(engine) -> None:  # type: ignore[no-untyped-def]
    (submission_id,) = _enqueue(engine)
    job = _claim(engine, "w1")
    with Session(engine) as session:
        assert not queue.finish(
            session=session, job_id=job.job_id, worker_id="intruder", result=_result()
        )
        assert queue.finish(session=session, job_id=job.job_id, worker_id="w1", result=_result())
        assert not queue.finish(
            session=session, job_id=job.job_id, worker_id="w1", result=_result()
        )
    with Session(engine) as session:
        submission = session.get(Submission, submission_id)
        assert submission.status == "passed"
        assert GradeResult.model_validate_json(submission.result_json).score == 1.0
        assert session.get(Job, job.job_id).status == JobStatus.done


@both_databases
def test_expired_lease_is_claimed_again_and_the_old_worker_cannot_finish(engine) -> None:  # type: ignore[no-untyped-def]
    _enqueue(engine)
    first = _claim(engine, "dead-worker", lease_s=1.0)  # long enough for a loaded machine
    assert _claim(engine, "w2") is None  # still leased
    time.sleep(1.05)
    second = _claim(engine, "w2")
    assert second is not None and second.job_id == first.job_id and second.attempts == 2
    with Session(engine) as session:
        assert not queue.finish(
            session=session, job_id=first.job_id, worker_id="dead-worker", result=_result()
        )
        assert queue.finish(session=session, job_id=second.job_id, worker_id="w2", result=_result())


@both_databases
def test_renew_keeps_the_lease(engine) -> None:  # type: ignore[no-untyped-def]
    _enqueue(engine)
    job = _claim(engine, "w1", lease_s=0.2)
    for _ in range(3):
        time.sleep(0.1)
        with Session(engine) as session:
            assert queue.renew(session=session, job_id=job.job_id, worker_id="w1", lease_s=0.2)
    assert _claim(engine, "w2") is None
    with Session(engine) as session:
        assert not queue.renew(session=session, job_id=job.job_id, worker_id="w2", lease_s=1)


@both_databases
def test_job_goes_dead_after_max_attempts_with_an_internal_error(engine) -> None:  # type: ignore[no-untyped-def]
    (submission_id,) = _enqueue(engine)
    for attempt in range(2):
        job = _claim(engine, f"w{attempt}", lease_s=0.01, max_attempts=2)
        assert job is not None
        time.sleep(0.03)
    assert _claim(engine, "w9", max_attempts=2) is None
    with Session(engine) as session:
        job_row = session.get(Job, job.job_id)
        assert job_row.status == JobStatus.dead and "2 times" in job_row.last_error
        submission = session.get(Submission, submission_id)
        result = GradeResult.model_validate_json(submission.result_json)
        assert submission.status == "error" and result.error.kind == "internal_error"


@postgresql_only
def test_concurrent_claims_skip_a_row_locked_by_another_transaction(engine) -> None:  # type: ignore[no-untyped-def]
    """A claim never waits for a row another worker's transaction holds: it takes the next one
    (FOR UPDATE SKIP LOCKED). SQLite has no row locks (one writer at a time), hence PG only."""
    first, second = _enqueue(engine, 2)
    assert engine.dialect.name == "postgresql"
    holder = Session(engine)
    try:
        locked = holder.execute(
            text("SELECT id FROM job WHERE submission_id = :s FOR UPDATE"), {"s": first}
        ).scalar_one()
        started = time.monotonic()
        job = _claim(engine, "w2")
        waited = time.monotonic() - started
        assert job is not None and job.submission_id == second and job.job_id != locked
        assert waited < 1.0, f"the claim waited {waited:.2f} s for a locked row"
    finally:
        holder.rollback()
        holder.close()
    assert _claim(engine, "w3").submission_id == first


@both_databases
def test_many_threads_many_engines_claim_each_job_once(engine, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """8 claimers, each with its own engine (connection pool) like separate worker processes,
    drain 200 jobs: each claimed exactly once."""
    _enqueue(engine, 200)
    claimed: list[int] = []
    lock = threading.Lock()
    engines = [make_engine(settings) for _ in range(8)]

    def claimer(index: int) -> None:
        while (job := _claim(engines[index], f"w{index}")) is not None:
            with Session(engines[index]) as session:
                assert queue.finish(
                    session=session, job_id=job.job_id, worker_id=f"w{index}", result=_result()
                )
            with lock:
                claimed.append(job.job_id)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for other in engines:
        other.dispose()
    assert len(claimed) == 200 and len(set(claimed)) == 200
    with Session(engine) as session:
        statuses = session.execute(text("SELECT status, count(*) FROM job GROUP BY status")).all()
    assert dict(statuses) == {"done": 200}


@both_databases
def test_fail_gives_the_job_back_then_buries_it_with_the_reason(engine) -> None:  # type: ignore[no-untyped-def]
    (submission_id,) = _enqueue(engine)
    first = _claim(engine, "w1", max_attempts=2)
    with Session(engine) as session:
        assert not queue.fail(
            session=session, job_id=first.job_id, worker_id="w9", error="x", max_attempts=2
        )
        assert queue.fail(
            session=session, job_id=first.job_id, worker_id="w1", error="E: one", max_attempts=2
        )
    with Session(engine) as session:
        job = session.get(Job, first.job_id)
        assert job.status == JobStatus.queued and job.last_error == "E: one"
        assert session.get(Submission, submission_id).status == "queued"
    second = _claim(engine, "w2", max_attempts=2)
    assert second.attempts == 2
    with Session(engine) as session:
        assert queue.fail(
            session=session, job_id=second.job_id, worker_id="w2", error="E: two", max_attempts=2
        )
    with Session(engine) as session:
        job = session.get(Job, first.job_id)
        assert job.status == JobStatus.dead
        assert job.last_error == "failed 2 times; last error: E: two"
        submission = session.get(Submission, submission_id)
        result = GradeResult.model_validate_json(submission.result_json)
        assert submission.status == "error" and result.error.kind == "internal_error"
        assert "E: two" in result.error.message


@both_databases
def test_a_sender_with_jobs_running_waits_behind_one_without(engine) -> None:  # type: ignore[no-untyped-def]
    """Fair between client addresses: a flood of older jobs from one address does not keep a
    later job from another address waiting once a worker is free."""
    with Session(engine) as session:
        staged = [
            queue.stage(
                session=session,
                exercise="l/e",
                code=f"# {address} {i}",
                locale="en",
                owner=f"learner:{address}{i}",
                client_address=address,
            ).id
            for address, i in [("10.0.0.1", 0), ("10.0.0.1", 1), ("10.0.0.1", 2), ("10.0.0.2", 0)]
        ]
        session.commit()
    flood, honest = staged[:3], staged[3]
    assert _claim(engine, "w1").submission_id == flood[0]  # nobody runs anything: oldest
    assert _claim(engine, "w2").submission_id == honest  # the flooder has one running
    assert _claim(engine, "w3").submission_id == flood[1]  # only the flooder waits now
