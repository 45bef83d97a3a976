"""The gpu-memory training problem, built identically inside the sandbox and on trusted ground.

A deep MLP on a batch that is large next to the model's width, so that the activations saved for
the backward pass, not the weights, gradients or optimizer state, dominate a training step's
memory: that is what micro-batching and activation checkpointing reduce. Everything is a pure
function of the scenario (its seed above all): the trusted side rebuilds the data and the initial
weights itself and never takes them from the sandbox.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn

from ...seeding import Scenario, init_weights

IN_FEATURES = 16
WIDTH = 32
DEPTH = 16  # hidden Linear + Tanh pairs; the model has 2 * DEPTH + 1 children
OUT_FEATURES = 4
# Tanh's recommended gain: the signal neither dies out nor saturates across 16 layers, so every
# layer gets a gradient of similar size (a mistake in the first layers is not lost in rounding).
GAIN = 5 / 3
FINGERPRINT_SEED = 7919


@dataclass(frozen=True)
class MemoryScenario(Scenario):
    seed: int
    examples: int
    budget: float  # the step's peak may be at most budget x the plain step's peak
    optimizer: str = "sgd"  # "sgd" | "adam"
    lr: float = 0.05


def make_data(s: MemoryScenario) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets, float64 on the CPU; callers cast and move them."""
    generator = torch.Generator().manual_seed(s.seed)
    x = torch.randn(s.examples, IN_FEATURES, generator=generator, dtype=torch.float64)
    teacher = torch.randn(IN_FEATURES, OUT_FEATURES, generator=generator, dtype=torch.float64)
    noise = torch.randn(s.examples, OUT_FEATURES, generator=generator, dtype=torch.float64)
    return x, torch.sin(x @ teacher / math.sqrt(IN_FEATURES)) + 0.1 * noise


def make_model(s: MemoryScenario) -> nn.Sequential:
    """The scenario's model with seeded weights (a private generator, never torch's global RNG),
    float64 on the CPU."""
    layers: list[nn.Module] = []
    fan_in = IN_FEATURES
    for _ in range(DEPTH):
        layers += [nn.Linear(fan_in, WIDTH), nn.Tanh()]
        fan_in = WIDTH
    layers.append(nn.Linear(fan_in, OUT_FEATURES))
    model = nn.Sequential(*layers).to(torch.float64)
    # std GAIN / sqrt(fan_in) for the weights, so every tanh layer gets a similar gradient
    init_weights(model, s.seed + 1, lambda m: (GAIN * math.sqrt(3 / m.in_features), 0.1))
    return model


def make_optimizer(s: MemoryScenario, model: nn.Module) -> torch.optim.Optimizer:
    if s.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=s.lr)
    return torch.optim.SGD(model.parameters(), lr=s.lr)


def make_loss_fn() -> nn.Module:
    """What the learner gets as `loss_fn`: MSE with mean reduction."""
    return nn.MSELoss(reduction="mean")


def fingerprint_vector() -> torch.Tensor:
    """A fixed direction: each input row's projection on it identifies the row (float64, CPU)."""
    generator = torch.Generator().manual_seed(FINGERPRINT_SEED)
    return torch.randn(IN_FEATURES, generator=generator, dtype=torch.float64)
