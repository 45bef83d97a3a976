"""Deterministic training problems, built identically inside the sandbox and on trusted ground."""

from dataclasses import dataclass

import torch
from torch import nn

IN_FEATURES = 8
HIDDEN = 16


@dataclass(frozen=True)
class AccumulationScenario:
    seed: int
    accum_steps: int
    microbatches: int
    micro_batch_size: int
    optimizer: str  # "sgd" | "adam"
    lr: float

    @classmethod
    def from_dict(cls, data: dict) -> "AccumulationScenario":
        return cls(
            seed=int(data["seed"]),
            accum_steps=int(data["accum_steps"]),
            microbatches=int(data["microbatches"]),
            micro_batch_size=int(data["micro_batch_size"]),
            optimizer=str(data["optimizer"]),
            lr=float(data["lr"]),
        )


def make_data(scenario: AccumulationScenario) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets in float64 on the CPU; callers cast and move them."""
    generator = torch.Generator().manual_seed(scenario.seed)
    n = scenario.microbatches * scenario.micro_batch_size
    x = torch.randn(n, IN_FEATURES, generator=generator, dtype=torch.float64)
    w = torch.randn(IN_FEATURES, 1, generator=generator, dtype=torch.float64)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=generator, dtype=torch.float64)
    return x, y


def make_model(scenario: AccumulationScenario) -> nn.Module:
    """A small MLP with seeded initial weights, float64 on the CPU."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(scenario.seed)
        model = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    return model.to(torch.float64)


def make_optimizer(scenario: AccumulationScenario, model: nn.Module) -> torch.optim.Optimizer:
    if scenario.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=scenario.lr)
    return torch.optim.SGD(model.parameters(), lr=scenario.lr)


def make_loss_fn() -> nn.Module:
    return nn.MSELoss(reduction="mean")
