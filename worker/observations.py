"""Parse the observations blob from the sandbox defensively: bounded, typed, never executed."""

import json
import struct
from dataclasses import dataclass
from typing import Any

import torch

from worker.harness.protocol import OBSERVATIONS_META_KEY, OBSERVATIONS_VERSION, READY_MARKER

MAX_HEADER_BYTES = 1 << 20


class BadObservations(ValueError):
    """The sandbox sent something that is not a well-formed observations blob."""


@dataclass(frozen=True)
class Observations:
    meta: dict[str, Any]
    tensors: dict[str, torch.Tensor]

    def tensor(self, name: str, *, dims: int, width: int | None = None) -> torch.Tensor:
        """A float64 tensor of the expected rank (and last-dimension width), or BadObservations."""
        value = self.tensors.get(name)
        if value is None or value.dim() != dims or value.dtype != torch.float64:
            raise BadObservations(f"{name}: missing or wrong shape/dtype")
        if width is not None and value.shape[-1] != width:
            raise BadObservations(f"{name}: width {value.shape[-1]}, expected {width}")
        return value


def learner_code_started(stream: bytes) -> bool:
    """The harness got as far as starting the learner's code."""
    return stream.startswith(READY_MARKER)


def parse(stream: bytes) -> Observations:
    if not learner_code_started(stream):
        raise BadObservations("the harness never reached the learner's code")
    blob = stream[len(READY_MARKER) :]
    if len(blob) < 8:
        raise BadObservations("no observations (the process ended before writing them)")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if header_len > MAX_HEADER_BYTES or 8 + header_len > len(blob):
        raise BadObservations("header too large or truncated")
    try:
        header = json.loads(blob[8 : 8 + header_len])
        meta = json.loads(header["__metadata__"][OBSERVATIONS_META_KEY])
    except (ValueError, KeyError, TypeError) as exc:
        raise BadObservations(f"unreadable header: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("version") != OBSERVATIONS_VERSION:
        raise BadObservations("unknown observations version")
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        tensors = load(blob)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise BadObservations(f"unreadable tensors: {exc}") from exc
    return Observations(meta=meta, tensors=tensors)
