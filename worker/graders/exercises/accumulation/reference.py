"""A gradient-accumulation scenario rebuilt on trusted ground: its data, its expected
accumulation windows and micro-batch weights, reference gradients and the reference run.

Always float64 on the CPU, from the scenario's seed: nothing here comes from the sandbox except
the parameter vectors at which gradients are evaluated.
"""

from functools import lru_cache

import torch
from torch.nn.utils import parameters_to_vector

from worker.graders.reference import SeededProblem, flat_gradient, step_with
from worker.harness.exercises.accumulation.problem import (
    IGNORE_INDEX,
    VOCAB,
    AccumulationScenario,
    fingerprint_direction,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
)


class AccumulationProblem(SeededProblem):
    scenario: AccumulationScenario

    def __init__(self, scenario: AccumulationScenario) -> None:
        super().__init__(scenario, make_data(scenario), make_model(scenario))
        n, a = scenario.microbatches, scenario.accum_steps
        self.windows = [list(range(start, min(start + a, n))) for start in range(0, n, a)]
        self._sum_loss = (
            torch.nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction="sum")
            if scenario.model == "tokens"
            else torch.nn.MSELoss(reduction="sum")
        )
        self._mean_loss = make_loss_fn(scenario)
        direction = fingerprint_direction(scenario)
        rows = self.x.to(torch.float64).reshape(self.x.shape[0], -1)
        size = scenario.micro_batch_size
        # each micro-batch's row fingerprints, sorted: rows may repeat (padded token rows),
        # micro-batches as a whole are told apart
        self.signatures = [
            torch.sort(rows[start : start + size] @ direction).values
            for start in range(0, rows.shape[0], size)
        ]
        self._scale = max(float(rows.abs().max()) * float(direction.abs().sum()), 1.0)

    @property
    def tokens(self) -> bool:
        return self.scenario.model == "tokens"

    def microbatch_of(self, fingerprints: torch.Tensor, tol: float, hint: int) -> int | None:
        """The micro-batch whose rows these fingerprints are (any order), trying `hint` (the
        one a loop in order would take next) first; None if they are no micro-batch."""
        if fingerprints.numel() == 0 or not bool(torch.isfinite(fingerprints).all()):
            return None
        wanted = torch.sort(fingerprints).values
        order = (
            [hint, *range(len(self.signatures))]
            if 0 <= hint < len(self.signatures)
            else range(len(self.signatures))
        )
        for index in order:
            signature = self.signatures[index]
            if (
                signature.numel() == wanted.numel()
                and float((signature - wanted).abs().max()) <= tol * self._scale
            ):
                return index
        return None

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        size = self.scenario.micro_batch_size
        start = (index % self.scenario.microbatches) * size
        return self.x[start : start + size], self.y[start : start + size]

    def count(self, index: int) -> int:
        """Loss terms in micro-batch `index`: valid tokens, or examples."""
        _, y = self.batch(index)
        return int((y != IGNORE_INDEX).sum()) if self.tokens else int(y.numel())

    def expected_weights(self, window: list[int]) -> torch.Tensor:
        """The weight of each micro-batch's mean loss in a correct update of `window`: its
        share of the window's loss terms (equal for equal micro-batches)."""
        counts = torch.tensor([self.count(j) for j in window], dtype=torch.float64)
        return counts / counts.sum()

    def _grad(self, theta: torch.Tensor, loss_of_model) -> torch.Tensor:  # type: ignore[no-untyped-def]
        self.load(theta)
        return flat_gradient(loss_of_model(self.model), self.params)

    def _forward(self, model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        out = model(x)
        return out.reshape(-1, VOCAB) if self.tokens else out

    def _targets(self, y: torch.Tensor) -> torch.Tensor:
        return y.reshape(-1) if self.tokens else y

    def microbatch_gradient(self, theta: torch.Tensor, index: int) -> torch.Tensor:
        """Gradient of micro-batch `index`'s own mean loss, as the learner's `loss_fn` gives it."""
        x, y = self.batch(index)
        return self._grad(theta, lambda m: self._mean_loss(self._forward(m, x), self._targets(y)))

    def reference_gradient(self, theta: torch.Tensor, window: list[int]) -> torch.Tensor:
        """The full-batch gradient of `window`: one forward over all its micro-batches, the loss
        averaged over all its loss terms (for BatchNorm, statistics over the whole window). At
        the initial parameters (every first update of a correct loop) it is computed once per
        process."""
        if torch.equal(theta, self.initial):
            return _initial_gradient(self.scenario, tuple(window))
        return self.window_gradient(theta, window)

    def window_gradient(self, theta: torch.Tensor, window: list[int]) -> torch.Tensor:
        x = torch.cat([self.batch(j)[0] for j in window])
        y = torch.cat([self.batch(j)[1] for j in window])
        total = sum(self.count(j) for j in window)
        return self._grad(
            theta, lambda m: self._sum_loss(self._forward(m, x), self._targets(y)) / total
        )

    def reference_run(self) -> list[torch.Tensor]:
        """Parameters after each full-batch update, one per window, from the same start. It
        depends on the scenario alone, so it is computed once per process."""
        return list(_reference_run(self.scenario))


@lru_cache(maxsize=256)
def _initial_gradient(scenario: AccumulationScenario, window: tuple[int, ...]) -> torch.Tensor:
    problem = AccumulationProblem(scenario)  # its own model: safe to share across threads
    return problem.window_gradient(problem.initial, list(window))


@lru_cache(maxsize=64)
def _reference_run(scenario: AccumulationScenario) -> tuple[torch.Tensor, ...]:
    problem = AccumulationProblem(scenario)  # its own model: safe to share across threads
    model = make_model(scenario)
    optimizer = make_optimizer(scenario, model)
    after = []
    for window in problem.windows:
        theta = parameters_to_vector(model.parameters()).detach().clone()
        after.append(step_with(model, optimizer, problem.window_gradient(theta, window)))
    return tuple(after)
