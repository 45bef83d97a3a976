"""One gradient-accumulation scenario as the harness recorded it in the learner's process,
validated against the rebuilt problem. Claims and hints: the grader compares the claims with
recomputation and uses the hints (which micro-batches each forward carried) for feedback only.
"""

import math
from dataclasses import dataclass
from typing import Any

import torch

from worker.graders.exercises.accumulation.reference import AccumulationProblem
from worker.graders.kit import as_int, as_list
from worker.harness.exercises.accumulation.problem import IN_FEATURES
from worker.observations import BadObservations, Observations

MAX_LIST = 4096


@dataclass
class Recording:
    """One scenario's observations, validated against the rebuilt problem."""

    grads: torch.Tensor  # [recorded steps, width]
    params: torch.Tensor  # [recorded steps, width], just before each update
    final: torch.Tensor  # [width]
    steps: int
    forwards_before: list[int]  # forward passes before each recorded step
    forward_batches: list[int | None]  # the micro-batch each forward carried (None: not one)
    forward_rows: list[int]  # rows (examples, or token sequences) each forward carried

    @classmethod
    def read(
        cls, obs: Observations, index: int, meta: Any, problem: AccumulationProblem, tol: float
    ) -> "Recording":
        if not isinstance(meta, dict):
            raise BadObservations(f"scenario {index}: no record")
        width = problem.width
        grads = obs.tensor(f"s{index}.grads", dims=2, width=width)
        params = obs.tensor(f"s{index}.params", dims=2, width=width)
        final = obs.tensor(f"s{index}.final", dims=1, width=width)
        fingerprints = obs.tensor(f"s{index}.fingerprints", dims=1)
        step_meta = as_list(meta.get("step_meta"), "step_meta", longest=MAX_LIST)
        forwards_before = []
        for item in step_meta:
            if not isinstance(item, dict):
                raise BadObservations(f"scenario {index}: malformed step record")
            forwards_before.append(as_int(item.get("forwards"), "forwards", minimum=0))
        rows = [
            as_int(n, "fingerprint rows", minimum=0)
            for n in as_list(meta.get("fingerprint_rows"), "fingerprint_rows", longest=MAX_LIST)
        ]
        shapes = as_list(meta.get("forward_shapes"), "forward_shapes", longest=MAX_LIST)
        steps = as_int(meta.get("steps"), "steps", minimum=0)
        if (
            not len(forwards_before) == grads.shape[0] == params.shape[0]
            or steps < len(forwards_before)
            or len(shapes) != len(rows)
            or sum(rows) != fingerprints.numel()
            or any(b > len(rows) for b in forwards_before)
        ):
            raise BadObservations(f"scenario {index}: records do not line up")
        forward_batches: list[int | None] = []
        offset, hint = 0, 0
        for count in rows:
            batch = problem.microbatch_of(fingerprints[offset : offset + count], tol, hint)
            forward_batches.append(batch)
            hint = batch + 1 if batch is not None else hint
            offset += count
        row_width = problem.scenario.seq_len if problem.tokens else IN_FEATURES
        forward_rows = []
        for shape in shapes:
            sizes = [as_int(n, "shape", minimum=0) for n in as_list(shape, "shape", longest=8)]
            forward_rows.append(math.prod(sizes) // row_width)
        return cls(grads, params, final, steps, forwards_before, forward_batches, forward_rows)

    def consumed(self) -> list[int] | None:
        """How many micro-batches (0, 1, 2... in order) had gone through the model before each
        step; None when the forwards do not read as whole micro-batches taken in order."""
        counts, seen = [], -1
        for forwards in self.forwards_before:
            for batch in self.forward_batches[:forwards]:
                if batch is None or batch > seen + 1:
                    return None  # not one micro-batch (a window, a slice...), or out of order
                seen = max(seen, batch)
            counts.append(seen + 1)
        return counts

    def seen(self) -> int:
        """Distinct micro-batches that went through the model."""
        return len({b for b in self.forward_batches if b is not None})

    def window_forward(self, problem: AccumulationProblem) -> int | None:
        """The examples of the first forward that carried more than a micro-batch holds (a
        window run at once, in any shape), if the harness saw one."""
        return next((n for n in self.forward_rows if n > problem.scenario.micro_batch_size), None)

    def params_after(self, k: int) -> torch.Tensor:
        return self.params[k + 1] if k + 1 < self.grads.shape[0] else self.final
