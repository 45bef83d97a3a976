"""Deterministic training problems, built identically inside the sandbox and on trusted ground.

Everything is a pure function of the scenario (its seed above all): the trusted side rebuilds
the data and the initial weights itself and never takes them from the sandbox.
"""

from dataclasses import dataclass

import torch
from torch import nn

from .seeding import Scenario, init_weights

IN_FEATURES = 8
HIDDEN = 16
VOCAB = 11
EMBED = 8
IGNORE_INDEX = -100
PAD_ID = 0


@dataclass(frozen=True)
class AccumulationScenario(Scenario):
    seed: int
    accum_steps: int
    microbatches: int
    micro_batch_size: int
    optimizer: str = "sgd"  # "sgd" | "adam"
    lr: float = 0.1
    model: str = "mlp"  # "mlp" | "mlp_bn" (regression) | "tokens" (next-token, padded)
    seq_len: int = 6  # tokens only
    sparse_microbatch: int = -1  # tokens only: this micro-batch is almost all padding
    informational: bool = False  # run and reported, never graded


def make_data(s: AccumulationScenario) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets on the CPU (float64 for regression); callers cast and move them."""
    generator = torch.Generator().manual_seed(s.seed)
    n = s.microbatches * s.micro_batch_size
    if s.model == "tokens":
        return _token_data(s, generator, n)
    x = torch.randn(n, IN_FEATURES, generator=generator, dtype=torch.float64)
    w = torch.randn(IN_FEATURES, 1, generator=generator, dtype=torch.float64)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=generator, dtype=torch.float64)
    return x, y


def _token_data(
    s: AccumulationScenario, generator: torch.Generator, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded sequences of very uneven length; labels are IGNORE_INDEX on padding."""
    tokens = torch.randint(1, VOCAB, (n, s.seq_len), generator=generator)
    labels = torch.randint(0, VOCAB, (n, s.seq_len), generator=generator)
    lengths = torch.randint(1, s.seq_len + 1, (n,), generator=generator)
    if 0 <= s.sparse_microbatch < s.microbatches:
        start = s.sparse_microbatch * s.micro_batch_size
        lengths[start : start + s.micro_batch_size] = 1
        lengths[start] = 2
    padding = torch.arange(s.seq_len).unsqueeze(0) >= lengths.unsqueeze(1)
    return tokens.masked_fill(padding, PAD_ID), labels.masked_fill(padding, IGNORE_INDEX)


def make_model(s: AccumulationScenario) -> nn.Module:
    """The scenario's model with seeded initial weights, float64 on the CPU. The weights come
    from a private generator, never from torch's global RNG (thread-safe, and untouched by
    whatever else seeds it)."""
    if s.model == "tokens":
        model = nn.Sequential(nn.Embedding(VOCAB, EMBED), nn.Tanh(), nn.Linear(EMBED, VOCAB))
    elif s.model == "mlp_bn":
        model = nn.Sequential(
            nn.Linear(IN_FEATURES, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1)
        )
    else:
        model = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    model = model.to(torch.float64)
    init_weights(model, s.seed + 1)
    return model


def make_optimizer(s: AccumulationScenario, model: nn.Module) -> torch.optim.Optimizer:
    if s.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=s.lr)
    return torch.optim.SGD(model.parameters(), lr=s.lr)


def make_loss_fn(s: AccumulationScenario) -> nn.Module:
    """What the learner gets as `loss_fn`: always a mean reduction."""
    if s.model == "tokens":
        return nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction="mean")
    return nn.MSELoss(reduction="mean")
