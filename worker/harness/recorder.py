"""What every exercise's in-sandbox recorder offers `run_phase`: hooks around the learner's script.

An exercise's `setup(scenario, ctx) -> (names, recorder)` makes the script's globals (`names`)
and the recorder that watches them. Everything a recorder reports is an observation, and it
lives in the learner's process: the trusted side uses it for feedback (which mistake, where),
and decides pass or fail only on what it recomputes or what the kernel measured from outside.
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class Recorder:
    def count_backward(self) -> None:
        """Called on every `Tensor.backward()` while the script runs."""

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Wraps the learner's script (e.g. to watch saved tensors while it runs)."""
        yield

    def after_script(self, names: dict[str, Any]) -> None:
        """Called once the script has run, with its globals (e.g. to call a function it
        defined). Errors raised here are the learner's, reported at the learner's line."""

    def failed(self, exc: BaseException) -> bool:
        """Called when the script raised `exc`. True: the recorder knows its cause and has noted
        it (the script counts as stopped, not crashed); False: a learner's runtime error."""
        del exc
        return False

    def observations(self, prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """Tensors (named `prefix.*`) and JSON-able metadata of one scenario."""
        raise NotImplementedError


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One float64 CPU vector (copied to the CPU first: no device memory is allocated)."""
    return torch.cat([t.detach().to("cpu").to(torch.float64).reshape(-1) for t in tensors])


def stacked(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Recorded vectors as one [len(rows), width] tensor (also when nothing was recorded)."""
    return torch.stack(rows) if rows else torch.zeros(0, width, dtype=torch.float64)
