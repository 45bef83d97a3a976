"""The mixed-precision problem, built identically inside the sandbox and on trusted ground.

Everything is a pure function of the scenario (its seed above all): the trusted side rebuilds
the data and the initial weights itself and never takes them from the sandbox. The poisoned
batch (an inf or NaN in its inputs) exists only in the sandbox: the trusted reference skips it,
as a correct GradScaler loop does.
"""

from dataclasses import dataclass

import torch
from torch import nn

from ...seeding import Scenario, init_weights

IN_FEATURES = 8
HIDDEN = 16
CLIP_EPS = 1e-6  # clip_grad_norm_'s own epsilon: coef = max_norm / (total_norm + 1e-6)


@dataclass(frozen=True)
class AmpScenario(Scenario):
    seed: int
    batches: int
    batch_size: int
    inf_batch: int  # index of the batch whose inputs hold an inf or NaN
    poison: str = "nan"  # "nan": one NaN input; "inf": a whole example of +inf (inf - inf = NaN)
    lr: float = 0.05
    momentum: float = 0.0
    max_norm: float = 1.0
    # Small enough that no finite batch's scaled fp16 gradients come near 65504 (the largest
    # per-parameter sum here is about 2 * init_scale * mean |error| < 8k), large enough that
    # none underflows (the smallest are ~1e-4 unscaled, ~0.1 scaled).
    init_scale: float = 1024.0


def make_data(s: AmpScenario) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean inputs and targets, float64 on the CPU (the poison is added by `poisoned`)."""
    generator = torch.Generator().manual_seed(s.seed)
    n = s.batches * s.batch_size
    x = torch.randn(n, IN_FEATURES, generator=generator, dtype=torch.float64)
    w = torch.randn(IN_FEATURES, 1, generator=generator, dtype=torch.float64)
    y = 2.0 * torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=generator, dtype=torch.float64)
    return x, y


def poisoned(s: AmpScenario, x: torch.Tensor) -> torch.Tensor:
    """A copy of `x` whose batch `inf_batch` overflows: its loss and gradients are non-finite."""
    x = x.clone()
    row = s.inf_batch * s.batch_size
    if s.poison == "inf":
        x[row] = float("inf")  # the first layer sums +inf and -inf terms: NaN from there on
    else:
        x[row, 0] = float("nan")
    return x


def make_model(s: AmpScenario) -> nn.Module:
    """The scenario's MLP with seeded initial weights, float64 on the CPU (private generator,
    never torch's global RNG)."""
    model = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    model = model.to(torch.float64)
    init_weights(model, s.seed + 1)
    return model


def make_optimizer(s: AmpScenario, model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=s.lr, momentum=s.momentum)
