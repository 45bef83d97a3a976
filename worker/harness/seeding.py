"""What every exercise's problem shares: scenarios parsed from the grader's JSON, and weights
drawn from a private, seeded generator.

The weights never come from torch's global RNG: a problem is built identically inside the
sandbox and on trusted ground, in any thread, whatever else has seeded torch.
"""

from collections.abc import Callable
from dataclasses import fields
from typing import Any, Self

import torch
from torch import nn


class Scenario:
    """Mixin for a frozen dataclass of int/float/str/bool fields, built from the grader's JSON."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Known fields only, each cast to its declared type (the values cross the sandbox
        boundary as JSON)."""
        types = {f.name: f.type for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: types[k](v) for k, v in data.items() if k in types})  # type: ignore[operator]


def uniform_(tensor: torch.Tensor, bound: float, generator: torch.Generator) -> None:
    """Fill `tensor` in place from U(-bound, bound)."""
    tensor.copy_(
        (torch.rand(tensor.shape, generator=generator, dtype=tensor.dtype) * 2 - 1) * bound
    )


def default_bound(linear: nn.Linear) -> tuple[float, float]:
    """PyTorch's default scale for a Linear layer: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = linear.in_features**-0.5
    return bound, bound


def init_weights(
    model: nn.Module,
    seed: int,
    bounds: Callable[[nn.Linear], tuple[float, float]] = default_bound,
) -> None:
    """Seed the layers in module order: a Linear layer's weight and bias uniform within
    `bounds` (PyTorch's default scale unless given), an Embedding standard normal."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                weight_bound, bias_bound = bounds(module)
                uniform_(module.weight, weight_bound, generator)
                uniform_(module.bias, bias_bound, generator)
            elif isinstance(module, nn.Embedding):
                weight = module.weight
                weight.copy_(torch.randn(weight.shape, generator=generator, dtype=weight.dtype))
