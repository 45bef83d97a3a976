"""Admission to the database: at most `db_request_slots` requests of this process use it at once.

Why. Sync dependencies and endpoints run on a pool of 40 threads; the database pool has
`db_pool_size + db_max_overflow` connections. With more requests than connections, threads
block in the pool waiting for a connection while the requests that hold the connections wait
for a thread to take their next step (a threadpool hop, a session's teardown): nobody moves
until the pool's timeout, then everybody gets a 500, and the backlog keeps the process down
long after the load ends. Bounding the requests that may hold a session to fewer than the
connections (and far fewer than the threads) means a connection is always free for an admitted
request, so neither pool can deadlock the other.

How. The request's session (app.deps.get_session) is handed out only inside a slot. A request
waits up to `admission_wait_s` for one, then gets 503 with `Retry-After`: overload is answered
at once, it never piles up. Requests that need no database (a cached lesson page for a
visitor without a session cookie, static files) never wait here. `/healthz` and the short
polls of a `?wait` request use their own short sessions outside the slots, from the
connections held back for them (gradlab.config's RESERVED_CONNECTIONS).
"""

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import HTTPException


class Overloaded(HTTPException):
    """503 with Retry-After: the server is busy; the request was not started."""

    def __init__(self, what: str, retry_after_s: float) -> None:
        super().__init__(
            status_code=503,
            detail=f"the server is busy ({what}); try again in {math.ceil(retry_after_s)} s",
            headers={"Retry-After": str(math.ceil(retry_after_s))},
        )


class Gate:
    """`limit` slots; a slot is held from `admit()` until the block ends or `release()`."""

    def __init__(self, limit: int, *, wait_s: float) -> None:
        self.limit, self.wait_s = limit, wait_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(limit)

    def _semaphore(self) -> asyncio.Semaphore:
        """The slots of the running loop (one per process; a test's clients may bring others)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._slots = loop, asyncio.Semaphore(self.limit)
        return self._slots

    @asynccontextmanager
    async def admit(self) -> AsyncIterator["Slot"]:
        slots = self._semaphore()
        try:
            await asyncio.wait_for(slots.acquire(), timeout=self.wait_s)
        except TimeoutError:
            raise Overloaded("every database slot is taken", 1 + self.wait_s) from None
        slot = Slot(slots)
        try:
            yield slot
        finally:
            slot.release()


class Slot:
    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots: asyncio.Semaphore | None = slots

    def release(self) -> None:
        """Give the slot back early (before a long wait that holds no connection); idempotent."""
        if self._slots is not None:
            self._slots.release()
            self._slots = None


class Counter:
    """At most `limit` holders at once, no waiting: `enter()` says whether one more fits."""

    def __init__(self, limit: int) -> None:
        self.limit, self.count = limit, 0

    def enter(self) -> bool:
        if self.count >= self.limit:
            return False
        self.count += 1
        return True

    def leave(self) -> None:
        self.count -= 1
