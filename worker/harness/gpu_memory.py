"""In-sandbox setup for the gpu-memory exercise: the learner's names, a measured baseline step,
and a recorder that measures the learner's step the same way.

Memory accounting. What a training step costs is the peak of the bytes held by live tensors
while it runs, minus what was already there (weights, the batch). Two meters take it:

- `LiveTensorTracker` (every device; the verdict on the CPU): a TorchDispatchMode that sees every
  ATen op, forward, backward, recomputation and optimizer alike, counts each *new* storage an op
  returns (not views or in-place results, which share an input's storage), and un-counts it when
  the storage dies (a weakref finalizer on the storage's Python object, which PyTorch keeps alive
  exactly as long as the storage itself). Its peak is the CPU stand-in for
  `torch.cuda.max_memory_allocated`, without the allocator's rounding or library workspaces.
- on CUDA, `torch.cuda.max_memory_allocated() - memory_allocated()` around the block (the
  verdict there), after a warm-up step that makes cuBLAS allocate its workspaces outside it.

Why not count the bytes saved for backward with `torch.autograd.graph.saved_tensors_hooks`, as
first planned: only the innermost pair of those hooks applies, and non-reentrant
`torch.utils.checkpoint` installs its own inside the checkpointed region, so outer hooks see
nothing of it: neither the recomputed activations nor the segment inputs its closure keeps
alive. `checkpoint(model, x)` around the whole model would then measure ~0 although on a GPU it
saves nothing (the recomputation rebuilds every activation during backward). Saved-tensor
counting also misses gradients, optimizer state and temporaries, which are real memory too.

Everything measured here is an observation only; the trusted side decides what it means.
"""

import contextlib
import copy
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from .memory_problem import (
    MemoryScenario,
    fingerprint_vector,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
)
from .recorder import Recorder, flat, stacked

MAX_RECORDED_ROWS = 1 << 14  # fingerprints of the rows that went into the first layer
MAX_RECORDED_FORWARDS = 4096


def _tensors(value: Any, found: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors in an op's (nested) arguments or results."""
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, list | tuple):
        for item in value:
            _tensors(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _tensors(item, found)
    return found


def _storage(tensor: torch.Tensor) -> torch.UntypedStorage | None:
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, nested, functional wrappers...
        return None


class LiveTensorTracker(TorchDispatchMode):
    """Bytes of the storages allocated by ops while active and still alive, and their peak."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.live: dict[int, int] = {}  # storage address -> bytes
        self.total = 0
        self.peak = 0
        self.paused = 0  # > 0 while the recorder itself computes (its tensors are not the step's)

    def _release(self, key: int) -> None:
        self.total -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        inputs = set()
        for tensor in _tensors((args, kwargs), []):
            storage = _storage(tensor)
            if storage is not None:
                inputs.add(storage.data_ptr())
        for tensor in _tensors(out, []):
            if tensor.device != self.device:
                continue  # e.g. a `.cpu()` copy during a CUDA step: not device memory
            storage = _storage(tensor)
            if storage is None or storage.nbytes() == 0:
                continue
            key = storage.data_ptr()
            if key in inputs or key in self.live:
                continue  # a view, an in-place or out= result: no new memory
            self.live[key] = storage.nbytes()
            self.total += storage.nbytes()
            # Runs when the storage is freed (its address cannot be reused before that).
            weakref.finalize(storage, self._release, key)
        self.peak = max(self.peak, self.total)
        return out

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1


class MemoryMeter:
    """Measures one block: tracked peak bytes, and on CUDA the allocator's peak as well."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.tracker = LiveTensorTracker(device)
        self.allocated_peak: int | None = None

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            before = torch.cuda.memory_allocated(self.device)
        try:
            with self.tracker:
                yield
        finally:
            if cuda:
                torch.cuda.synchronize(self.device)
                self.allocated_peak = torch.cuda.max_memory_allocated(self.device) - before

    def report(self) -> dict[str, int | None]:
        return {"tracked": self.tracker.peak, "allocated": self.allocated_peak}


def measure_baseline(
    scenario: MemoryScenario,
    model: nn.Module,
    loss_fn: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
) -> dict[str, int | None]:
    """The plain full-batch step on a copy of the model, measured as the learner's will be."""
    baseline = copy.deepcopy(model)
    optimizer = make_optimizer(scenario, baseline)
    if x.device.type == "cuda":
        # cuBLAS allocates a workspace per thread on first use (the backward runs on another
        # thread): pay both here, outside every measured block.
        loss_fn(baseline(x[:2]), y[:2]).backward()
        baseline.zero_grad(set_to_none=True)
    meter = MemoryMeter(x.device)
    with meter.measure():
        loss_fn(baseline(x), y).backward()
        optimizer.step()
    return meter.report()


def _ignored(*_args: Any, **_kwargs: Any) -> None:
    """Stands in for the peak-resetting functions while the learner's script runs."""


class MemoryRecorder(Recorder):
    """Measures the learner's script and records the first optimizer.step()'s inputs."""

    def __init__(
        self,
        model: nn.Sequential,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        baseline: dict[str, int | None],
    ) -> None:
        self.model = model
        self.params = list(model.parameters())
        self.baseline = baseline
        self.meter = MemoryMeter(device)
        self.steps = 0
        self.backward_calls = 0
        self.grad_none = 0
        self.step_grads: list[torch.Tensor] = []
        self.step_params: list[torch.Tensor] = []
        self.forward_sizes: list[int] = []
        self.rows: list[torch.Tensor] = []
        self.row_count = 0
        self.rows_truncated = False
        self._direction = fingerprint_vector()
        optimizer.register_step_pre_hook(self._on_step)
        first = model[0]
        first.register_forward_pre_hook(self._on_first_layer)

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
        with self.meter.tracker.pause():
            self.rows.append(flat([rows]).reshape(rows.shape) @ self._direction)
        self.forward_sizes.append(int(rows.shape[0]))
        self.row_count += int(rows.shape[0])

    def _on_step(self, _optimizer: torch.optim.Optimizer, _args: tuple, _kwargs: dict) -> None:
        self.steps += 1
        if self.steps > 1:
            return
        with self.meter.tracker.pause():
            self.grad_none = sum(p.grad is None for p in self.params)
            grads = [
                p.grad if p.grad is not None else torch.zeros(p.shape, dtype=torch.float64)
                for p in self.params
            ]
            self.step_grads.append(flat(grads))
            self.step_params.append(flat(self.params))

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        # The learner cannot reset the peak we are measuring (they may still call these).
        resets = ("reset_peak_memory_stats", "reset_max_memory_allocated")
        saved = {name: getattr(torch.cuda, name) for name in resets}
        with self.meter.measure():
            for name in resets:
                setattr(torch.cuda, name, _ignored)
            try:
                yield
            finally:
                for name, function in saved.items():
                    setattr(torch.cuda, name, function)

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
            "memory": {"baseline": self.baseline, "step": self.meter.report()},
        }
        return tensors, meta


def setup(
    scenario_data: dict, device: torch.device, dtype: torch.dtype
) -> tuple[dict[str, Any], MemoryRecorder]:
    """The learner's globals for one scenario, and the recorder watching them."""
    scenario = MemoryScenario.from_dict(scenario_data)
    x, y = make_data(scenario)
    x, y = x.to(device, dtype), y.to(device, dtype)
    model = make_model(scenario).to(device, dtype)
    loss_fn = make_loss_fn()
    baseline = measure_baseline(scenario, model, loss_fn, x, y)
    optimizer = make_optimizer(scenario, model)
    recorder = MemoryRecorder(model, optimizer, device, baseline)
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
