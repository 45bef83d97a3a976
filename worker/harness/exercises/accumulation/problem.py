"""The gradient-accumulation exercises' training problem, built identically inside the sandbox
and on trusted ground.

Everything is a pure function of the scenario (its seed above all): the trusted side rebuilds
the data and the initial weights itself and never takes them from the sandbox.

Memory witnesses: a scenario with a large `width` (hidden units, or embedding size for tokens)
makes one micro-batch's activations megabytes, so that a whole accumulation window held at once
(stacked in any shape, or kept alive as one graph per micro-batch until a single backward)
raises the job's memory peak far above what one micro-batch at a time needs. The kernel measures
that peak from outside the learner's process (worker/cgroups.py).
"""

from dataclasses import dataclass

import torch
from torch import nn

from ...seeding import Scenario, init_weights

IN_FEATURES = 8
VOCAB = 11
IGNORE_INDEX = -100
PAD_ID = 0
FINGERPRINT_SEED = 7907


@dataclass(frozen=True)
class AccumulationScenario(Scenario):
    seed: int
    accum_steps: int
    microbatches: int
    micro_batch_size: int
    optimizer: str = "sgd"  # "sgd" | "adam"
    lr: float = 0.1
    model: str = "mlp"  # "mlp" | "mlp_bn" (regression) | "tokens" (next-token, padded)
    width: int = 0  # hidden units (mlp) or embedding size (tokens); 0: the small default
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
        embed = s.width or 8
        model = nn.Sequential(nn.Embedding(VOCAB, embed), nn.Tanh(), nn.Linear(embed, VOCAB))
    elif s.model == "mlp_bn":
        hidden = s.width or 16
        model = nn.Sequential(
            nn.Linear(IN_FEATURES, hidden), nn.BatchNorm1d(hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )
    else:
        hidden = s.width or 16
        model = nn.Sequential(nn.Linear(IN_FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, 1))
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


def fingerprint_direction(s: AccumulationScenario) -> torch.Tensor:
    """A fixed direction: an input row's projection on it identifies the row (float64, CPU).
    Rows are IN_FEATURES regression inputs, or `seq_len` token ids."""
    size = s.seq_len if s.model == "tokens" else IN_FEATURES
    generator = torch.Generator().manual_seed(FINGERPRINT_SEED)
    return torch.randn(size, generator=generator, dtype=torch.float64)
