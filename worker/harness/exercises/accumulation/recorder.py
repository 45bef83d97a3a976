"""In-sandbox setup for the gradient-accumulation exercises: the learner's names + a recorder.

The recorder watches (for feedback; the verdict is recomputed or measured outside):
- at every optimizer.step(), the gradients and parameters the update is about to use, and how
  many forward passes, backward calls and zero_grad calls came before it;
- at every forward pass of the model, the shape of its input and a fingerprint of each input
  row (its projection on a fixed direction), from which the trusted side tells which
  micro-batches each forward carried.
"""

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ...context import Context
from ...recorder import Recorder, flat, stacked
from .problem import (
    IGNORE_INDEX,
    VOCAB,
    AccumulationScenario,
    fingerprint_direction,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
)

MAX_RECORDED_STEPS = 256
MAX_RECORDED_FORWARDS = 4096
MAX_FINGERPRINTS = 1 << 16
MAX_SHAPE = 6  # dimensions of an input shape kept


class AccumulationRecorder(Recorder):
    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, direction: torch.Tensor
    ) -> None:
        self.params = list(model.parameters())
        self.direction = direction
        self.zero_grad_calls = 0
        self.backward_calls = 0
        self.steps = 0
        self.step_grads: list[torch.Tensor] = []
        self.step_params: list[torch.Tensor] = []
        self.step_meta: list[dict[str, Any]] = []
        self.forward_shapes: list[list[int]] = []
        self.fingerprints: list[torch.Tensor] = []  # per forward: one per row, or empty
        self.fingerprint_count = 0
        optimizer.register_step_pre_hook(self._on_step)
        model.register_forward_pre_hook(self._on_forward)
        self._wrap_zero_grad(optimizer)
        self._wrap_zero_grad(model)

    def _wrap_zero_grad(self, owner: Any) -> None:
        original = owner.zero_grad

        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self.zero_grad_calls += 1
            return original(*args, **kwargs)

        owner.zero_grad = zero_grad

    def count_backward(self) -> None:
        self.backward_calls += 1

    def _on_forward(self, _module: nn.Module, args: tuple) -> None:
        if len(self.forward_shapes) >= MAX_RECORDED_FORWARDS or not args:
            return
        first = args[0]
        if not isinstance(first, torch.Tensor) or first.dim() == 0:
            return
        self.forward_shapes.append([int(n) for n in first.shape[:MAX_SHAPE]])
        width = self.direction.numel()
        rows = first.numel() // width if first.shape[-1] == width else 0
        if rows and self.fingerprint_count + rows <= MAX_FINGERPRINTS:
            projected = flat([first]).reshape(rows, width) @ self.direction
            self.fingerprints.append(projected)
            self.fingerprint_count += rows
        else:
            self.fingerprints.append(torch.zeros(0, dtype=torch.float64))

    def _on_step(self, _optimizer: torch.optim.Optimizer, _args: tuple, _kwargs: dict) -> None:
        self.steps += 1
        if len(self.step_grads) >= MAX_RECORDED_STEPS:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        self.step_grads.append(flat(grads))
        self.step_params.append(flat(self.params))
        self.step_meta.append(
            {
                "forwards": len(self.forward_shapes),
                "zero_grad_calls": self.zero_grad_calls,
                "backward_calls": self.backward_calls,
                "grad_none": sum(p.grad is None for p in self.params),
            }
        )

    def observations(self, prefix: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        width = sum(p.numel() for p in self.params)
        tensors = {
            f"{prefix}.grads": stacked(self.step_grads, width),
            f"{prefix}.params": stacked(self.step_params, width),
            f"{prefix}.final": flat(self.params),
            f"{prefix}.fingerprints": torch.cat(self.fingerprints)
            if self.fingerprints
            else torch.zeros(0, dtype=torch.float64),
        }
        meta = {
            "steps": self.steps,
            "step_meta": self.step_meta,
            "zero_grad_calls": self.zero_grad_calls,
            "backward_calls": self.backward_calls,
            "forward_shapes": self.forward_shapes,
            "fingerprint_rows": [int(f.numel()) for f in self.fingerprints],
        }
        return tensors, meta


class MicroBatchDataset(TensorDataset):
    """A TensorDataset that hands the DataLoader a whole micro-batch by one indexing per tensor
    (a plain one is read and stacked row by row: most of a memory witness's running time)."""

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        index = torch.as_tensor(indices, device=self.tensors[0].device)
        return [tensor[index] for tensor in self.tensors]


def _already_batched(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    """The DataLoader's collate step for MicroBatchDataset: the batch is ready, as the list
    [inputs, targets] a default DataLoader would have made."""
    return batch


def setup(scenario_data: dict, ctx: Context) -> tuple[dict[str, Any], AccumulationRecorder]:
    """The learner's globals for one scenario, and the recorder watching them."""
    scenario = AccumulationScenario.from_dict(scenario_data)
    x, y = make_data(scenario)
    if x.is_floating_point():
        x, y = x.to(ctx.dtype), y.to(ctx.dtype)
    dataset = MicroBatchDataset(x.to(ctx.device), y.to(ctx.device))
    loader = DataLoader(
        dataset, batch_size=scenario.micro_batch_size, shuffle=False, collate_fn=_already_batched
    )
    model = make_model(scenario).to(ctx.device, ctx.dtype)
    optimizer = make_optimizer(scenario, model)
    recorder = AccumulationRecorder(model, optimizer, fingerprint_direction(scenario))
    names = {
        "model": model,
        "loss_fn": make_loss_fn(scenario),
        "optimizer": optimizer,
        "loader": loader,
        "accum_steps": scenario.accum_steps,
        "torch": torch,
        "nn": nn,
    }
    if scenario.model == "tokens":
        names.update(ignore_index=IGNORE_INDEX, vocab_size=VOCAB)
    return names, recorder
