"""Rate limits shared by every web process: a sliding window log per key, kept in the database.

Why the database. The limits are the brakes on password guessing, submission floods and draft
spam; a count kept in one process's memory is divided by the number of processes (or hosts)
behind the load balancer, and forgotten on every restart. Every web process already shares the
application database, so the counts live there, in `rate_limit`: one row per key with its
recent hits, each as `[time, count]` (a batch of 40 submissions is one entry of 40).

Why it cannot be raced. A hit is one short transaction on the limiter's own connections (never
the request's session, whose transaction must not be committed by a limit). Its first statement
is a write to the key's row (an upsert that changes nothing): on PostgreSQL that takes the row's
lock, on SQLite the database's write lock, so the read and the update that follow see every
earlier hit and no concurrent one. Two processes can never both take the last free hit.

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
            return hits, min(max(at + window_s - now, 0.001), window_s)  # clocks of hosts
    raise AssertionError("unreachable: the hits in the window exceed the limit")


UPSERT = text(
    "INSERT INTO rate_limit (key, hits, expires_at) VALUES (:key, '[]', 0) "
    "ON CONFLICT (key) DO UPDATE SET expires_at = rate_limit.expires_at"
)
READ = text("SELECT hits FROM rate_limit WHERE key = :key")
WRITE = text("UPDATE rate_limit SET hits = :hits, expires_at = :expires WHERE key = :key")
SWEEP = text("DELETE FROM rate_limit WHERE expires_at < :now")


class DatabaseRateLimiter:
    """The application's rate limiter (app.main puts it on `app.state.rate_limiter`)."""

    SWEEP_EVERY = 1000

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.time) -> None:
        self._engine, self._clock = engine, clock
        self._hits_since_sweep = 0
        self._lock = threading.Lock()

    def hit(self, key: str, *, limit: int, window_s: float, cost: int = 1) -> float | None:
        digest = hashlib.sha256(key.encode()).hexdigest()
        with self._engine.begin() as connection:
            connection.execute(UPSERT, {"key": digest})  # the lock comes first (module doc)
            now = self._clock()  # read under the lock: the log's times only grow
            stored = connection.execute(READ, {"key": digest}).scalar_one()
            hits, wait = admit(
                json.loads(stored), now=now, limit=limit, window_s=window_s, cost=cost
            )
            if wait is None:
                connection.execute(
                    WRITE,
                    {"key": digest, "hits": json.dumps(hits), "expires": now + window_s},
                )
        self._maybe_sweep(now)
        return wait

    def sweep(self, now: float | None = None) -> int:
        """Delete the keys whose window has passed; how many went."""
        with self._engine.begin() as connection:
            now = self._clock() if now is None else now
            return connection.execute(SWEEP, {"now": now}).rowcount

    def _maybe_sweep(self, now: float) -> None:
        with self._lock:
            self._hits_since_sweep += 1
            due = self._hits_since_sweep >= self.SWEEP_EVERY
            if due:
                self._hits_since_sweep = 0
        if due:
            self.sweep(now)
