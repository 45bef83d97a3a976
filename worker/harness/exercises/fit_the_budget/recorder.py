"""In-sandbox setup for `gpu-memory/fit-the-budget`: the learner's names and a recorder of the
step.

Memory is not measured here. Each scenario runs in three processes of its own, each in a fresh
cgroup whose peak the worker reads from outside (worker/cgroups.py; on CUDA the driver's
figure, worker/gpu_watchdog.py), all three through the same path with the same names:

- `idle` (trusted): an empty script: what every phase holds before the step;
- `plain` (trusted): the plain full-batch step as a script;
- the learner's script.

The step's cost is a phase's peak minus `idle`'s; the learner's against `plain`'s is the ratio
judged against the budget. Nothing the script does in its own process (hooks, meters, weakref
tricks, memory parked in NumPy) changes what the kernel counts.

The recorder watches, for feedback only: the gradients and parameters at the first
optimizer.step(), and a fingerprint of every row that entered the first layer (which examples
each forward carried: the chunks).
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ...context import Context
from ...recorder import Recorder, flat, stacked
from .problem import (
    MemoryScenario,
    fingerprint_vector,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
)

MAX_RECORDED_ROWS = 1 << 15  # fingerprints of the rows that went into the first layer
MAX_RECORDED_FORWARDS = 4096


class MemoryRecorder(Recorder):
    """Records the first optimizer.step()'s inputs and which rows each forward carried."""

    def __init__(self, model: nn.Sequential, optimizer: torch.optim.Optimizer) -> None:
        self.params = list(model.parameters())
        self.steps = 0
        self.backward_calls = 0
        self.zero_grad_calls = 0
        self.grad_none = 0
        self.step_grads: list[torch.Tensor] = []
        self.step_params: list[torch.Tensor] = []
        self.forward_sizes: list[int] = []
        self.rows: list[torch.Tensor] = []
        self.row_count = 0
        self.rows_truncated = False
        self.zero_grad_between: list[int] = []  # forwards seen at each zero_grad before a step
        self.reentrant_checkpoints = 0  # torch.utils.checkpoint calls with use_reentrant=True
        self._direction = fingerprint_vector()
        optimizer.register_step_pre_hook(self._on_step)
        model[0].register_forward_pre_hook(self._on_first_layer)
        for owner in (optimizer, model):
            self._wrap_zero_grad(owner)

    def _wrap_zero_grad(self, owner: Any) -> None:
        original = owner.zero_grad

        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self.zero_grad_calls += 1
            if self.steps == 0 and len(self.zero_grad_between) < MAX_RECORDED_FORWARDS:
                self.zero_grad_between.append(len(self.forward_sizes))
            return original(*args, **kwargs)

        owner.zero_grad = zero_grad

    def count_backward(self) -> None:
        self.backward_calls += 1

    def _on_first_layer(self, _module: nn.Module, args: tuple) -> None:
        """Which examples entered the model: one fingerprint per input row."""
        if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 2:
            return
        rows = args[0]
        if (
            self.rows_truncated
            or len(self.forward_sizes) >= MAX_RECORDED_FORWARDS
            or self.row_count + rows.shape[0] > MAX_RECORDED_ROWS
            or rows.shape[1] != len(self._direction)
        ):
            self.rows_truncated = True  # sizes and fingerprints stop together: they line up
            return
        self.rows.append(flat([rows]).reshape(rows.shape) @ self._direction)
        self.forward_sizes.append(int(rows.shape[0]))
        self.row_count += int(rows.shape[0])

    def _on_step(self, _optimizer: torch.optim.Optimizer, _args: tuple, _kwargs: dict) -> None:
        self.steps += 1
        if self.steps > 1:
            return
        self.grad_none = sum(p.grad is None for p in self.params)
        grads = [
            p.grad if p.grad is not None else torch.zeros(p.shape, dtype=torch.float64)
            for p in self.params
        ]
        self.step_grads.append(flat(grads))
        self.step_params.append(flat(self.params))

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Count reentrant checkpointing (it explains parameters left without a gradient)."""
        import torch.utils.checkpoint as module

        originals = {
            name: getattr(module, name) for name in ("checkpoint", "checkpoint_sequential")
        }

        def counting(original: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if kwargs.get("use_reentrant", True):
                    self.reentrant_checkpoints += 1
                return original(*args, **kwargs)

            return wrapper

        for name, original in originals.items():
            setattr(module, name, counting(original))
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(module, name, original)

    def observations(self, prefix: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        width = sum(p.numel() for p in self.params)
        rows = torch.cat(self.rows) if self.rows else torch.zeros(0, dtype=torch.float64)
        tensors = {
            f"{prefix}.grads": stacked(self.step_grads, width),
            f"{prefix}.params": stacked(self.step_params, width),
            f"{prefix}.final": flat(self.params),
            f"{prefix}.rows": rows,
        }
        meta = {
            "steps": self.steps,
            "backward_calls": self.backward_calls,
            "grad_none": self.grad_none,
            "forward_sizes": self.forward_sizes,
            "rows_truncated": self.rows_truncated,
            "zero_grad_between": self.zero_grad_between,
            "reentrant_checkpoints": self.reentrant_checkpoints,
        }
        return tensors, meta


def setup(scenario_data: dict, ctx: Context) -> tuple[dict[str, Any], MemoryRecorder]:
    """The learner's globals for one scenario, and the recorder watching them."""
    scenario = MemoryScenario.from_dict(scenario_data)
    x, y = make_data(scenario)
    x, y = x.to(ctx.device, ctx.dtype), y.to(ctx.device, ctx.dtype)
    model = make_model(scenario).to(ctx.device, ctx.dtype)
    loss_fn = make_loss_fn()
    if ctx.device.type == "cuda":
        # cuBLAS allocates a workspace per thread on first use (the backward runs on another
        # thread): every phase pays both here, before its step.
        loss_fn(model(x[:2]), y[:2]).backward()
        model.zero_grad(set_to_none=True)
    optimizer = make_optimizer(scenario, model)
    recorder = MemoryRecorder(model, optimizer)
    names = {
        "model": model,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "x": x,
        "y": y,
        "budget": scenario.budget,
        "torch": torch,
        "nn": nn,
    }
    return names, recorder
