"""What every exercise's in-sandbox recorder offers `run_job`: hooks around the learner's script.

A harness module has `setup(scenario, device, dtype) -> (names, recorder)`; `names` become the
script's globals and the recorder watches them. Everything a recorder reports is an observation
only: the trusted side decides what it means.
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

    def observations(self, prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """Tensors (named `prefix.*`) and JSON-able metadata of one scenario."""
        raise NotImplementedError


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One float64 CPU vector (copied to the CPU first: no device memory is allocated)."""
    return torch.cat([t.detach().to("cpu").to(torch.float64).reshape(-1) for t in tensors])


def stacked(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Recorded vectors as one [len(rows), width] tensor (also when nothing was recorded)."""
    return torch.stack(rows) if rows else torch.zeros(0, width, dtype=torch.float64)
