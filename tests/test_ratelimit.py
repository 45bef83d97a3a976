"""The rate limiter: a sliding window log per key in the database, exact under concurrency and
shared by every web process (app/security/ratelimit.py), on SQLite and PostgreSQL."""

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from app.security.ratelimit import DatabaseRateLimiter, Limit, admit, hit_in_order
from gradlab.config import PROJECT_ROOT, Settings
from gradlab.db import init_db, make_engine
from tests.pg import both_databases


@pytest.fixture
def engines(settings: Settings) -> Iterator[list[Engine]]:
    """Two engines on one database: what two web processes have."""
    made = [make_engine(settings, pool_size=4, overflow=0) for _ in range(2)]
    init_db(made[0])
    yield made
    for engine in made:
        engine.dispose()


@both_databases
def test_the_window_slides_and_refusals_do_not_count(engines: list[Engine]) -> None:
    now = [100.0]
    limiter = DatabaseRateLimiter(engines[0], clock=lambda: now[0])
    assert [limiter.hit("k", limit=2, window_s=10) for _ in range(2)] == [None, None]
    assert limiter.hit("k", limit=2, window_s=10) == pytest.approx(10.0)
    assert limiter.hit("other", limit=2, window_s=10) is None
    now[0] += 4
    assert limiter.hit("k", limit=2, window_s=10) == pytest.approx(6.0)  # refusals do not count
    now[0] += 6
    assert limiter.hit("k", limit=2, window_s=10) is None


@both_databases
def test_a_batch_counts_its_items(engines: list[Engine]) -> None:
    now = [0.0]
    limiter = DatabaseRateLimiter(engines[0], clock=lambda: now[0])
    assert limiter.hit("batch", limit=10, window_s=60, cost=4) is None
    now[0] = 5.0
    assert limiter.hit("batch", limit=10, window_s=60, cost=4) is None
    assert limiter.hit("batch", limit=10, window_s=60, cost=4) == pytest.approx(55.0)
    assert limiter.hit("batch", limit=10, window_s=60, cost=2) is None  # exactly full
    assert limiter.hit("batch", limit=10, window_s=60, cost=11) == 60.0  # never fits


@both_databases
def test_hit_in_order_stops_at_the_first_refusal(engines: list[Engine]) -> None:
    limiter = DatabaseRateLimiter(engines[0], clock=lambda: 100.0)
    limits = [Limit("narrow", 2, 60), Limit("wide", 100, 3600)]
    assert [hit_in_order(limiter, limits) for _ in range(2)] == [None, None]
    assert hit_in_order(limiter, limits) == pytest.approx(60.0)
    # the wide key saw only the 2 allowed events: 98 more fit, the 99th does not
    assert limiter.hit("wide", limit=100, window_s=3600, cost=98) is None
    assert limiter.hit("wide", limit=100, window_s=3600) is not None


@both_databases
def test_two_processes_share_one_count_and_never_both_take_the_last_hit(
    engines: list[Engine],
) -> None:
    """40 threads over two engines (two web processes) race for 25 hits: exactly 25 pass."""
    limiters = [DatabaseRateLimiter(engine) for engine in engines]
    answers: list[float | None] = []
    lock, start = threading.Lock(), threading.Barrier(40)

    def one(n: int) -> None:
        start.wait()
        wait = limiters[n % 2].hit("shared", limit=25, window_s=60)
        with lock:
            answers.append(wait)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers.count(None) == 25
    assert all(0 < wait <= 60 for wait in answers if wait is not None)


@both_databases
def test_expired_keys_are_swept_and_kept_keys_are_not(engines: list[Engine]) -> None:
    now = [0.0]
    limiter = DatabaseRateLimiter(engines[0], clock=lambda: now[0])
    assert limiter.hit("login-email:ada", limit=1, window_s=3600) is None
    for n in range(5):
        assert limiter.hit(f"login-ip:{n}", limit=1, window_s=60) is None
    now[0] = 120.0  # idle for a minute-long key, not for an hour-long one
    assert limiter.sweep() == 5
    assert limiter.hit("login-email:ada", limit=1, window_s=3600) == pytest.approx(3480.0)
    now[0] = 4000.0
    assert limiter.sweep() == 1
    with engines[0].connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM rate_limit")).scalar() == 0


@both_databases
def test_the_table_holds_no_email_or_address(engines: list[Engine]) -> None:
    limiter = DatabaseRateLimiter(engines[0])
    limiter.hit("login-ip-email:203.0.113.7:ada@example.org", limit=5, window_s=60)
    with engines[0].connect() as connection:
        (key,) = connection.execute(text("SELECT key FROM rate_limit")).one()
    assert len(key) == 64 and "ada" not in key and "203" not in key


@both_databases
def test_login_attempts_count_across_web_processes(settings: Settings, tmp_path: Path) -> None:
    """Two apps on one database (two `gradlab serve` processes): the per-address login limit
    is one limit, not one per process."""
    from app.main import create_app

    settings = settings.model_copy(
        update={"content_dir": PROJECT_ROOT / "lessons", "login_rate_limit": 4}
    )
    first, second = create_app(settings), create_app(settings)
    wrong = {"email": "ada@example.org", "password": "not the password"}
    answers = []
    for n in range(6):
        with TestClient(first if n % 2 else second, client=("203.0.113.7", 4000)) as client:
            answers.append(client.post("/api/v1/auth/login", json=wrong).status_code)
    assert answers == [401, 401, 401, 401, 429, 429]


def test_admit_is_the_sliding_window_rule() -> None:
    hits, wait = admit([[0.0, 3], [5.0, 2]], now=12.0, limit=4, window_s=10, cost=1)
    assert hits == [[5.0, 2], [12.0, 1]] and wait is None  # the batch at 0 expired
    hits, wait = admit(hits, now=13.0, limit=4, window_s=10, cost=2)
    assert wait == pytest.approx(2.0)  # the two at 5 must go: at 15
