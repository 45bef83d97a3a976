"""Rate limits behind a small interface.

`SlidingWindowLimiter` keeps a log of recent hits per key in this process's memory, which is
exact for one web process. Scale-out (several `gradlab serve` processes or hosts behind a load
balancer) needs the counts in a store they all share, e.g. Redis (`ZADD`/`ZREMRANGEBYSCORE`/
`ZCARD` in one MULTI per hit, key expiry = window) or a table in the application database;
implement `RateLimiter.hit` on it and put it on `app.state.rate_limiter`.
"""

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol


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


class SlidingWindowLimiter:
    """In-process sliding window log: at most `limit` events per `window_s` seconds per key."""

    MAX_KEYS = 50_000  # beyond this, idle keys are swept on the next hit

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}
        self._windows: dict[str, float] = {}  # each key's window, for the sweep
        self._lock = threading.Lock()

    def hit(self, key: str, *, limit: int, window_s: float, cost: int = 1) -> float | None:
        now = self._clock()
        with self._lock:
            if len(self._hits) > self.MAX_KEYS:
                self._sweep(now)
            log = self._hits.setdefault(key, deque())
            self._windows[key] = window_s
            while log and log[0] <= now - window_s:
                log.popleft()
            if cost > limit:  # never allowed: say "a whole window" rather than "now"
                return window_s
            if len(log) + cost > limit:
                # the hit that must expire first so that `cost` more fit
                return max(log[len(log) + cost - limit - 1] + window_s - now, 0.001)
            log.extend([now] * cost)
            return None

    def _sweep(self, now: float) -> None:
        """Forget the keys with no hit left in their own window (an hour-long limit must not
        be forgotten because a minute-long one swept: a flood of fresh keys would reset it)."""
        for key in [
            k for k, log in self._hits.items() if not log or log[-1] <= now - self._windows[k]
        ]:
            del self._hits[key], self._windows[key]
