"""In-sandbox setup for the gradient-accumulation exercises: the learner's names + a recorder."""

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from .problems import (
    IGNORE_INDEX,
    VOCAB,
    AccumulationScenario,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
)
from .recorder import Recorder, flat, stacked

MAX_RECORDED_STEPS = 256
MAX_RECORDED_FORWARDS = 4096


class RecordingLoader(DataLoader):
    """A real DataLoader that counts the micro-batches it has handed out."""

    yielded = 0

    def __iter__(self):  # type: ignore[override]
        for batch in super().__iter__():
            self.yielded += 1
            yield batch


class AccumulationRecorder(Recorder):
    """Records, at every optimizer.step(), what the update is about to use."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, loader: RecordingLoader):
        self.model = model
        self.params = list(model.parameters())
        self.loader = loader
        self.zero_grad_calls = 0
        self.backward_calls = 0
        self.steps = 0
        self.step_grads: list[torch.Tensor] = []
        self.step_params: list[torch.Tensor] = []
        self.step_meta: list[dict[str, Any]] = []
        self.forward_batch_sizes: list[int] = []
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
        if len(self.forward_batch_sizes) < MAX_RECORDED_FORWARDS and args:
            first = args[0]
            if isinstance(first, torch.Tensor) and first.dim() > 0:
                self.forward_batch_sizes.append(int(first.shape[0]))

    def _on_step(self, _optimizer: torch.optim.Optimizer, _args: tuple, _kwargs: dict) -> None:
        self.steps += 1
        if len(self.step_grads) >= MAX_RECORDED_STEPS:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        self.step_grads.append(flat(grads))
        self.step_params.append(flat(self.params))
        self.step_meta.append(
            {
                "yielded": self.loader.yielded,
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
        }
        meta = {
            "steps": self.steps,
            "step_meta": self.step_meta,
            "yielded": self.loader.yielded,
            "zero_grad_calls": self.zero_grad_calls,
            "backward_calls": self.backward_calls,
            "forward_batch_sizes": self.forward_batch_sizes,
        }
        return tensors, meta


def setup(
    scenario_data: dict, device: torch.device, dtype: torch.dtype
) -> tuple[dict[str, Any], AccumulationRecorder]:
    """The learner's globals for one scenario, and the recorder watching them."""
    scenario = AccumulationScenario.from_dict(scenario_data)
    x, y = make_data(scenario)
    if x.is_floating_point():
        x, y = x.to(dtype), y.to(dtype)
    dataset = TensorDataset(x.to(device), y.to(device))
    loader = RecordingLoader(dataset, batch_size=scenario.micro_batch_size, shuffle=False)
    model = make_model(scenario).to(device, dtype)
    optimizer = make_optimizer(scenario, model)
    recorder = AccumulationRecorder(model, optimizer, loader)
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
