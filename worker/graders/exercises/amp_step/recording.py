"""One scenario of the mixed-precision exercise as the harness recorded it, validated (types,
sizes, shapes) before any use. Everything here was recorded in the learner's process: it is
compared with trusted recomputation (grader.py) or used for feedback only.
"""

from dataclasses import dataclass
from typing import Any

import torch

from worker.graders.kit import as_flag, as_int, as_number
from worker.observations import BadObservations, Observations

MAX_EVENTS = 2048
SHOWN = {
    "scale": "scaler.scale",
    "backward": "backward",
    "unscale": "scaler.unscale_",
    "clip": "clip_grad_norm_",
    "step": "scaler.step",
    "update": "scaler.update",
    "optimizer_step": "optimizer.step",
}
EVENT_KINDS = set(SHOWN)
STOP_REASONS = (
    None,
    "missing_update",
    "update_without_step",
    "fp16_weights",
    "grads_cleared",
    "unscaled_twice",
)


@dataclass(frozen=True)
class Event:
    iteration: int
    kind: str
    info: dict[str, Any]


@dataclass
class Recording:
    """One scenario's observations, validated (types, sizes, shapes) before any use."""

    grads: torch.Tensor  # [recorded steps, width]
    params: torch.Tensor  # [recorded steps, width], just before each real optimizer.step()
    step_iterations: list[int]
    snapshots: torch.Tensor  # [batches handed out, width], at each batch hand-out
    final: torch.Tensor  # [width]
    steps: int
    yielded: int
    events: list[Event]
    events_truncated: bool
    forwards: int
    autocast_forwards: int
    autocast_dtypes: list[str]
    param_dtypes: list[str]
    stopped: str | None
    stopped_iteration: int

    @classmethod
    def read(cls, obs: Observations, index: int, meta: Any, width: int) -> "Recording":
        if not isinstance(meta, dict):
            raise BadObservations(f"scenario {index}: no record")
        grads = obs.tensor(f"s{index}.grads", dims=2, width=width)
        params = obs.tensor(f"s{index}.params", dims=2, width=width)
        snapshots = obs.tensor(f"s{index}.snapshots", dims=2, width=width)
        final = obs.tensor(f"s{index}.final", dims=1, width=width)
        step_meta, raw_events = meta.get("step_meta"), meta.get("events")
        if not isinstance(step_meta, list) or not isinstance(raw_events, list):
            raise BadObservations(f"scenario {index}: malformed records")
        if len(raw_events) > MAX_EVENTS or not len(step_meta) == grads.shape[0] == params.shape[0]:
            raise BadObservations(f"scenario {index}: records do not line up")
        iterations = []
        for item in step_meta:
            if not isinstance(item, dict):
                raise BadObservations(f"scenario {index}: malformed step record")
            iterations.append(as_int(item.get("iteration"), "step iteration"))
            as_flag(item.get("direct"), "step direct")
        events = [cls._event(raw) for raw in raw_events]
        dtypes = meta.get("autocast_dtypes")
        if (
            not isinstance(dtypes, list)
            or len(dtypes) > 4
            or not all(isinstance(d, str) and len(d) < 40 for d in dtypes)
        ):
            raise BadObservations(f"scenario {index}: malformed autocast dtypes")
        param_dtypes = meta.get("param_dtypes")
        if (
            not isinstance(param_dtypes, list)
            or len(param_dtypes) > 8
            or not all(isinstance(d, str) and len(d) < 40 for d in param_dtypes)
        ):
            raise BadObservations(f"scenario {index}: malformed parameter dtypes")
        stopped = meta.get("stopped")
        if stopped not in STOP_REASONS:
            raise BadObservations(f"scenario {index}: unknown stop reason")
        recording = cls(
            grads=grads,
            params=params,
            step_iterations=iterations,
            snapshots=snapshots,
            final=final,
            steps=as_int(meta.get("steps"), "steps"),
            yielded=as_int(meta.get("yielded"), "yielded"),
            events=events,
            events_truncated=as_flag(meta.get("events_truncated"), "events_truncated"),
            forwards=as_int(meta.get("forwards"), "forwards"),
            autocast_forwards=as_int(meta.get("autocast_forwards"), "autocast_forwards"),
            autocast_dtypes=dtypes,
            param_dtypes=param_dtypes,
            stopped=stopped,
            stopped_iteration=as_int(meta.get("stopped_iteration"), "stopped_iteration"),
        )
        if recording.steps < len(iterations) or recording.yielded < snapshots.shape[0]:
            raise BadObservations(f"scenario {index}: counts do not line up")
        return recording

    @staticmethod
    def _event(raw: Any) -> Event:
        if not isinstance(raw, dict) or raw.get("k") not in EVENT_KINDS:
            raise BadObservations("malformed event")
        kind = raw["k"]
        info: dict[str, Any] = {}
        if kind == "backward":
            info = {
                "scaled": as_flag(raw.get("scaled"), "scaled"),
                "dirty": as_flag(raw.get("dirty"), "dirty"),
            }
        elif kind == "optimizer_step":
            info = {"direct": as_flag(raw.get("direct"), "direct")}
        elif kind == "step":
            info = {"ran": as_flag(raw.get("ran"), "ran")}
        elif kind == "update":
            info = {"scale": as_number(raw.get("scale"), "scale")}
        elif kind == "clip":
            info = {
                "unscaled": as_flag(raw.get("unscaled"), "unscaled"),
                "max_norm": as_number(raw.get("max_norm"), "max_norm"),
                "norm": as_number(raw.get("norm"), "norm"),
            }
        return Event(as_int(raw.get("i"), "event iteration"), kind, info)

    def params_after(self, iteration: int) -> torch.Tensor | None:
        """Parameters at the end of batch `iteration` (None if they were not recorded)."""
        if iteration + 1 < self.snapshots.shape[0]:
            return self.snapshots[iteration + 1]
        if iteration + 1 == self.yielded:
            return self.final
        return None

    def sequence(self, iteration: int) -> list[str]:
        """The AMP calls the learner made on batch `iteration`, in order. optimizer.step()
        counts only when called directly (scaler.step calls it on the learner's behalf)."""
        return [
            e.kind
            for e in self.events
            if e.iteration == iteration and (e.kind != "optimizer_step" or e.info["direct"])
        ]
