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
from collections.abc import Callable
from typing import Protocol


class RateLimiter(Protocol):
    def hit(self, key: str, *, limit: int, window_s: float, cost: int = 1) -> float | None:
        """Count `cost` events for `key` (a batch: its items). None when they are allowed;
        otherwise none is counted and the answer is how many seconds until they would be."""
        ...


class SlidingWindowLimiter:
    """In-process sliding window log: at most `limit` events per `window_s` seconds per key."""

    MAX_KEYS = 50_000  # beyond this, idle keys are swept on the next hit

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def hit(self, key: str, *, limit: int, window_s: float, cost: int = 1) -> float | None:
        now = self._clock()
        with self._lock:
            if len(self._hits) > self.MAX_KEYS:
                self._sweep(now - window_s)
            log = self._hits.setdefault(key, deque())
            while log and log[0] <= now - window_s:
                log.popleft()
            if cost > limit:  # never allowed: say "a whole window" rather than "now"
                return window_s
            if len(log) + cost > limit:
                # the hit that must expire first so that `cost` more fit
                return max(log[len(log) + cost - limit - 1] + window_s - now, 0.001)
            log.extend([now] * cost)
            return None

    def _sweep(self, horizon: float) -> None:
        for key in [k for k, log in self._hits.items() if not log or log[-1] <= horizon]:
            del self._hits[key]
