"""A gpu-memory scenario rebuilt on trusted ground: its data, full-batch and per-chunk gradients,
the reference step, and which examples a recorded forward pass carried.

Always float64 on the CPU, from the scenario's seed: nothing here comes from the sandbox except
the parameter vectors at which gradients are evaluated and the fingerprints being matched.
"""

from collections.abc import Sequence
from functools import lru_cache

import torch

from worker.graders.kit import Fingerprints
from worker.graders.reference import SeededProblem, flat_gradient, step_with
from worker.harness.exercises.fit_the_budget.problem import (
    MemoryScenario,
    fingerprint_vector,
    make_data,
    make_model,
    make_optimizer,
)


class MemoryProblem(SeededProblem):
    scenario: MemoryScenario

    def __init__(self, scenario: MemoryScenario) -> None:
        super().__init__(scenario, make_data(scenario), make_model(scenario))
        self.examples = scenario.examples
        self.fingerprints = Fingerprints(self.x, fingerprint_vector())

    def gradient(self, theta: torch.Tensor, rows: Sequence[int] | None = None) -> torch.Tensor:
        """Gradient of the mean loss over `rows` (all examples when None) at parameters theta:
        what `loss_fn(model(x[rows]), y[rows]).backward()` gives, in float64. The full batch's
        at the initial parameters (every correct step's) is computed once per process."""
        if rows is None and torch.equal(theta, self.initial):
            return _initial_gradient(self.scenario)
        return self._gradient(theta, rows)

    def _gradient(self, theta: torch.Tensor, rows: Sequence[int] | None) -> torch.Tensor:
        x, y = (self.x, self.y) if rows is None else (self.x[list(rows)], self.y[list(rows)])
        self.load(theta)
        return flat_gradient(torch.nn.functional.mse_loss(self.model(x), y), self.params)

    def reference_after(self) -> torch.Tensor:
        """Parameters after the one plain full-batch step (computed once per process)."""
        return _reference_after(self.scenario)


@lru_cache(maxsize=16)
def _initial_gradient(scenario: MemoryScenario) -> torch.Tensor:
    problem = MemoryProblem(scenario)  # its own model: safe to share across threads
    return problem._gradient(problem.initial, None)


@lru_cache(maxsize=16)
def _reference_after(scenario: MemoryScenario) -> torch.Tensor:
    problem = MemoryProblem(scenario)
    model = make_model(scenario)
    optimizer = make_optimizer(scenario, model)
    return step_with(model, optimizer, problem.gradient(problem.initial))
