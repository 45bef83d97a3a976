"""Rate limits shared by every web process: a sliding window log per key, kept in the database.

Why the database. The limits are the brakes on password guessing, submission floods and draft
spam; a count kept in one process's memory is divided by the number of processes (or hosts)
behind the load balancer, and forgotten on every restart. Every web process already shares the
application database, so the counts live there, in `rate_limit`: one row per key with its
recent hits, each as `[time, count]` (a batch of 40 submissions is one entry of 40).

Why it cannot be raced, and why it holds no lock. A hit reads the key's row (hits and a version
number), decides, and writes back with one statement that succeeds only if the version is still
the one it read (`UPDATE ... WHERE version = :read`; a new key: `INSERT ... ON CONFLICT DO
NOTHING`). A concurrent hit that wrote first makes that statement change no row, and this hit
starts again from a fresh read. So two processes can never both take the last free hit, and no
transaction stays open across Python work: on SQLite the database's single write lock is held
for one statement, not for a read-decide-write round trip that a busy CPU can stretch to tens
of milliseconds while every other writer (requests, workers) waits. The statements run in
autocommit on the limiter's own connections, never in the request's session, whose transaction
must not be committed by a limit.

Keys are stored as their SHA-256: the table holds no email or client address. Rows whose window
has passed are deleted every `SWEEP_EVERY` hits of a process, and a row that reappears starts
from an empty log, which is exactly what an expired window means.
"""

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Engine, text


class RateLimiter(Protocol):
    def hit(self, key: str, *, limit: int, window_s: float, cost: int = 1) -> float | None:
        """Count `cost` events for `key` (a batch: its items). None when they are allowed;
        otherwise none is counted and the answer is how many seconds until they would be."""
        ...


@dataclass(frozen=True)
class Limit:
    key: str
    limit: int
    window_s: float


def hit_in_order(limiter: RateLimiter, limits: Iterable[Limit]) -> float | None:
    """One event against each limit in turn, narrowest first; the first refusal stops there, so
    the later (wider) limits never count an event an earlier one refused. This is what keeps a
    wide limit (all attempts on one email, from everywhere) from being filled by one client
    that its own narrow limit already stopped. None when all allowed it, else the wait."""
    for each in limits:
        wait = limiter.hit(each.key, limit=each.limit, window_s=each.window_s)
        if wait is not None:
            return wait
    return None


Hits = list[list[float]]  # [[time, count], ...], oldest first


def admit(
    hits: Hits, *, now: float, limit: int, window_s: float, cost: int
) -> tuple[Hits, float | None]:
    """The sliding window log's rule: the hits still in the window, and None when `cost` more
    fit under `limit` (they are then added), else the seconds until enough of them expire."""
    hits = [entry for entry in hits if entry[0] > now - window_s]
    if cost > limit:  # never allowed: say "a whole window" rather than "now"
        return hits, window_s
    excess = sum(int(count) for _, count in hits) + cost - limit
    if excess <= 0:
        return [*hits, [now, cost]], None
    for at, count in hits:  # the hit whose expiry frees enough room
        excess -= int(count)
        if excess <= 0:
            return hits, min(max(at + window_s - now, 0.001), window_s)  # hosts' clocks
    raise AssertionError("unreachable: the hits in the window exceed the limit")


READ = text("SELECT hits, version FROM rate_limit WHERE key = :key")
CREATE = text(
    "INSERT INTO rate_limit (key, hits, expires_at, version) VALUES (:key, :hits, :expires, 1) "
    "ON CONFLICT (key) DO NOTHING"
)
REPLACE = text(
    "UPDATE rate_limit SET hits = :hits, expires_at = :expires, version = version + 1 "
    "WHERE key = :key AND version = :version"
)
SWEEP = text("DELETE FROM rate_limit WHERE expires_at < :now")
CONTENDED_RETRY_S = 1.0  # past MAX_ATTEMPTS lost races in a row: refused, try again soon


class DatabaseRateLimiter:
    """The application's rate limiter (app.main puts it on `app.state.rate_limiter`)."""

    SWEEP_EVERY = 1000
    MAX_ATTEMPTS = 50

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.time) -> None:
        self._engine, self._clock = engine, clock
        self._hits_since_sweep = 0
        self._lock = threading.Lock()

    def hit(self, key: str, *, limit: int, window_s: float, cost: int = 1) -> float | None:
        digest = hashlib.sha256(key.encode()).hexdigest()
        with self._engine.connect().execution_options(isolation_level="AUTOCOMMIT") as db:
            for _ in range(self.MAX_ATTEMPTS):
                row = db.execute(READ, {"key": digest}).first()
                now = self._clock()
                stored = json.loads(row.hits) if row is not None else []
                hits, wait = admit(stored, now=now, limit=limit, window_s=window_s, cost=cost)
                if wait is not None:
                    break
                values = {"key": digest, "hits": json.dumps(hits), "expires": now + window_s}
                if row is None:
                    written = db.execute(CREATE, values).rowcount
                else:
                    written = db.execute(REPLACE, {**values, "version": row.version}).rowcount
                if written == 1:
                    break
            else:  # lost every race: a burst on this one key; not counted, refused
                wait = CONTENDED_RETRY_S
        self._maybe_sweep(self._clock())
        return wait

    def sweep(self, now: float | None = None) -> int:
        """Delete the keys whose window has passed; how many went."""
        with self._engine.begin() as connection:
            return connection.execute(
                SWEEP, {"now": self._clock() if now is None else now}
            ).rowcount

    def _maybe_sweep(self, now: float) -> None:
        with self._lock:
            self._hits_since_sweep += 1
            due = self._hits_since_sweep >= self.SWEEP_EVERY
            if due:
                self._hits_since_sweep = 0
        if due:
            self.sweep(now)
