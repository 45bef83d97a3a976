"""Doorbells: a process wakes another on the same host at once, instead of leaving it to notice
a change at its next look at the database.

Why. Idle workers look at the queue every `poll_interval_s`, and a held request (the API's
`?wait`, the lesson page's result look) looks at its submission as often: on average half an
interval passes between a row being written and somebody noticing it, twice on the way from the
"Run and grade" click to the verdict. A ring closes both gaps: the web rings the workers when it
stores a submission, a worker rings the web processes when it stores a result, with the
submission's id, so that only the requests waiting for that one look again.

How. Unix datagram sockets in `<data_dir>/doorbells/` (mode 0700): each listener binds one, named
by its role (`worker-*.sock`, `web-*.sock`). A ring sends one datagram to every socket of a role,
never blocks, and removes the sockets nobody listens on any more (a process that died). A ring is
only a hint: the database stays the truth, and a process that misses one (on another host, with
a full socket buffer, behind a path too long for a socket) still sees the change at its next
poll. The sandbox sees neither the data directory nor the host's sockets.
"""

import contextlib
import logging
import os
import select
import socket
import uuid
from pathlib import Path

from gradlab.config import Settings

log = logging.getLogger(__name__)
WORKER = "worker"
WEB = "web"
MAX_MESSAGE = 256


def _directory(settings: Settings) -> Path:
    return settings.data_dir / "doorbells"


class Doorbell:
    """One listener's socket; without one (bind failed) it only ever times out."""

    def __init__(self, settings: Settings, role: str) -> None:
        self.path: Path | None = None
        self.sock: socket.socket | None = None
        directory = _directory(settings)
        path = directory / f"{role}-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            sock.bind(str(path))
        except OSError as exc:
            sock.close()
            log.info("no doorbell (%s): changes are noticed at the next poll", exc)
            return
        sock.setblocking(False)
        self.path, self.sock = path, sock

    def fileno(self) -> int:
        assert self.sock is not None
        return self.sock.fileno()

    def drain(self) -> list[bytes]:
        """The messages of the rings received so far."""
        messages: list[bytes] = []
        while self.sock is not None:
            try:
                messages.append(self.sock.recv(MAX_MESSAGE))
            except (BlockingIOError, InterruptedError):
                break
        return messages

    def wait(self, timeout_s: float) -> list[bytes]:
        """Until a ring or `timeout_s`; the rings' messages ([] after a timeout)."""
        if self.sock is None:
            select.select([], [], [], timeout_s)
            return []
        ready, _, _ = select.select([self.sock], [], [], timeout_s)
        return self.drain() if ready else []

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


def ring(settings: Settings, role: str, message: bytes = b"") -> int:
    """Ring every listener of `role`; how many were rung. Never blocks, never raises."""
    try:
        paths = list(_directory(settings).glob(f"{role}-*.sock"))
    except OSError:
        return 0
    if not paths:
        return 0
    rung = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for path in paths:
            try:
                sender.sendto(message[:MAX_MESSAGE], str(path))
                rung += 1
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):  # nobody listens there any more
                    path.unlink()
            except OSError:
                pass  # its buffer is full (it will wake anyway), or the path is too long
    return rung
