"""What an exercise's in-sandbox code gets for one scenario: where to compute, and the clock."""

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .protocol import FrameError, frame, read_frame


class Clock:
    """The job's side of the go/done conversation with the worker (harness/protocol.py).

    The worker measures the time between its "go" and the "done" that carries the result, so
    the work is timed from outside this process; the nonce arrives only with "go", so the result
    cannot have been computed before it.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def timed(self, work: Callable[[int], bytes], *, tag: int) -> None:
        """Run `work(nonce)` as one timed block; `tag` says which (a scenario index)."""
        self.sock.sendall(frame({"k": "ready", "tag": tag}))
        header, _ = read_frame(self.sock)
        nonce = header.get("nonce") if header.get("k") == "go" else None
        if isinstance(nonce, bool) or not isinstance(nonce, int):
            raise FrameError("expected go with a nonce")
        self.sock.sendall(frame({"k": "done"}, work(nonce)))
        # Sleep until the worker has read the CPU time: a sleeping process's time is all
        # charged to its cgroup, a running one's only at the next scheduler tick.
        header, _ = read_frame(self.sock)
        if header.get("k") != "ack":
            raise FrameError("expected ack")


class LocalClock(Clock):
    """For running a harness in-process (tests, tools): nonces from os.urandom, times kept here."""

    def __init__(self) -> None:
        self.blocks: list[tuple[int, int, bytes, float]] = []  # tag, nonce, result, seconds

    def timed(self, work: Callable[[int], bytes], *, tag: int) -> None:
        nonce = int.from_bytes(os.urandom(8), "big") >> 2
        started = time.perf_counter()
        result = work(nonce)
        self.blocks.append((tag, nonce, result, time.perf_counter() - started))


@dataclass
class Context:
    device: torch.device
    dtype: torch.dtype  # float64 on the CPU, float32 on CUDA (numerics policy)
    clock: Clock
    index: int  # the scenario's index in the job (observations are named `s<index>.*`)
