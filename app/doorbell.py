"""The web process's doorbell (gradlab/doorbell.py): a worker that stores a result rings it with
the submission's id, and the held requests waiting for that submission look again at once
instead of at their next poll (app/submissions/waiting.py)."""

import asyncio
import contextlib

from fastapi import FastAPI

from gradlab import doorbell
from gradlab.config import Settings


class WebDoorbell:
    """Waiters per submission id, woken from the event loop's reader on the doorbell socket."""

    def __init__(self, settings: Settings) -> None:
        self.bell = doorbell.Doorbell(settings, doorbell.WEB)
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def _listen(self) -> None:
        """Read rings on the running loop (one per process; a test's clients may bring more)."""
        loop = asyncio.get_running_loop()
        if self.bell.sock is None or loop is self._loop:
            return
        old, self._loop = self._loop, loop
        if old is not None and not old.is_closed():
            with contextlib.suppress(RuntimeError):  # it closed in between
                old.call_soon_threadsafe(old.remove_reader, self.bell.fileno())
        loop.add_reader(self.bell.fileno(), self._rung)

    def _rung(self) -> None:
        for message in self.bell.drain():
            for event in self._waiters.get(message.decode("ascii", errors="replace"), ()):
                event.set()

    async def wait(self, submission_id: str, timeout_s: float) -> None:
        """Until the submission's ring, or `timeout_s` (the poll interval) passed."""
        self._listen()
        event = asyncio.Event()
        waiting = self._waiters.setdefault(submission_id, set())
        waiting.add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            waiting.discard(event)
            if not waiting:
                self._waiters.pop(submission_id, None)


def web_doorbell(app: FastAPI) -> WebDoorbell:
    """The app's doorbell, made on first use (its socket lives as long as the process)."""
    bell = getattr(app.state, "doorbell", None)
    if bell is None:
        bell = app.state.doorbell = WebDoorbell(app.state.settings)
    return bell
