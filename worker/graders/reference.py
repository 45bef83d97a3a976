"""What every trusted reference shares: a scenario's model rebuilt from its seed, gradients as one
flat vector, and a real optimizer step taken with a given gradient."""

from typing import Any

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class SeededProblem:
    """A scenario's data and model, rebuilt on trusted ground from its seed; `initial` holds the
    model's starting parameters as one flat vector of `width` numbers."""

    def __init__(
        self, scenario: Any, data: tuple[torch.Tensor, torch.Tensor], model: torch.nn.Module
    ) -> None:
        self.scenario = scenario
        self.x, self.y = data
        self.model = model
        self.params = list(model.parameters())
        self.initial = parameters_to_vector(self.params).detach().clone()
        self.width = self.initial.numel()

    def load(self, theta: torch.Tensor) -> None:
        """Set the model's parameters to the flat vector `theta`."""
        vector_to_parameters(theta, self.params)


def flat_gradient(loss: torch.Tensor, params: list[torch.nn.Parameter]) -> torch.Tensor:
    """d loss / d params as one flat vector (zeros for parameters the loss does not use)."""
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat(
        [
            (g if g is not None else torch.zeros_like(p)).reshape(-1)
            for g, p in zip(grads, params, strict=True)
        ]
    )


def step_with(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad: torch.Tensor
) -> torch.Tensor:
    """One real optimizer step with the flat `grad` as the model's gradient; the flat
    parameters after it."""
    offset = 0
    for p in model.parameters():
        p.grad = grad[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    optimizer.step()
    return parameters_to_vector(model.parameters()).detach().clone()
