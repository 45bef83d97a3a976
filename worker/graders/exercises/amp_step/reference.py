"""A mixed-precision scenario rebuilt on trusted ground: clean data, the unscaled and clipped
reference gradient of any batch at any parameters (in float64, in plain float32, and with the
forward under autocast in a low-precision dtype), and the float64 reference run that skips the
poisoned batch. Nothing here comes from the sandbox except parameter vectors.
"""

from functools import lru_cache

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from worker.graders.reference import SeededProblem, flat_gradient, step_with
from worker.harness.exercises.amp_step.problem import (
    CLIP_EPS,
    AmpScenario,
    make_data,
    make_model,
    make_optimizer,
)


def clip(grad: torch.Tensor, max_norm: float) -> tuple[torch.Tensor, float]:
    """What clip_grad_norm_ does to a flat gradient (same epsilon, coefficient capped at 1);
    returns the clipped gradient and the norm before clipping."""
    norm = float(torch.linalg.vector_norm(grad))
    return grad * min(1.0, max_norm / (norm + CLIP_EPS)), norm


class AmpProblem(SeededProblem):
    scenario: AmpScenario

    def __init__(self, scenario: AmpScenario) -> None:
        super().__init__(scenario, make_data(scenario), make_model(scenario))
        self.loss_fn = torch.nn.MSELoss(reduction="mean")
        self.model32 = make_model(scenario).to(torch.float32)
        self.params32 = list(self.model32.parameters())

    @property
    def finite_batches(self) -> list[int]:
        """The batches a correct loop takes a real optimizer step on."""
        return [i for i in range(self.scenario.batches) if i != self.scenario.inf_batch]

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        size = self.scenario.batch_size
        start = (index % self.scenario.batches) * size
        return self.x[start : start + size], self.y[start : start + size]

    def gradient(self, theta: torch.Tensor, index: int) -> torch.Tensor:
        """Unscaled float64 gradient of batch `index`'s mean loss at parameters `theta`."""
        self.load(theta)
        x, y = self.batch(index)
        return flat_gradient(self.loss_fn(self.model(x), y), self.params)

    def clipped_gradient(self, theta: torch.Tensor, index: int) -> torch.Tensor:
        return clip(self.gradient(theta, index), self.scenario.max_norm)[0]

    def float32_gradient(
        self, theta: torch.Tensor, index: int, amp_dtype: torch.dtype | None
    ) -> torch.Tensor:
        """Batch `index`'s unscaled gradient as a float32 model computes it at `theta`, the
        forward (and the loss) under CPU autocast in `amp_dtype`, or in plain float32 when
        None; returned in float64. Scaling by GradScaler's powers of two is exact, so this is
        what a correct loop's unscaled gradient is, rounding for rounding."""
        vector_to_parameters(theta.to(torch.float32), self.params32)
        x, y = self.batch(index)
        with torch.autocast(
            "cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None
        ):
            loss = self.loss_fn(self.model32(x.to(torch.float32)), y.to(torch.float32))
        return flat_gradient(loss, self.params32).to(torch.float64)

    def reference_run(self) -> tuple[torch.Tensor, tuple[float, ...]]:
        """Final parameters of the float64 reference, and the gradient norm before clipping at
        each of its steps (the scenario design is tested on these)."""
        trajectory, norms = _reference_run(self.scenario)
        return trajectory[-1], norms


@lru_cache(maxsize=32)
def _reference_run(scenario: AmpScenario) -> tuple[tuple[torch.Tensor, ...], tuple[float, ...]]:
    """The parameters before the first and after every real step, and the norms."""
    problem = AmpProblem(scenario)  # its own model: safe to share across threads
    model = make_model(scenario)
    optimizer = make_optimizer(scenario, model)
    norms = []
    trajectory = [parameters_to_vector(model.parameters()).detach().clone()]
    for index in problem.finite_batches:
        theta = parameters_to_vector(model.parameters()).detach().clone()
        grad, norm = clip(problem.gradient(theta, index), scenario.max_norm)
        norms.append(norm)
        trajectory.append(step_with(model, optimizer, grad))
    return tuple(trajectory), tuple(norms)
