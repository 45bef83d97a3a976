"""In-sandbox setup for `profiling/find-the-bottleneck`: the learner's names and a recorder that,
after the script, runs and times the learner's `train_step` against the planted baseline.

What leaves the sandbox (observations only, judged on trusted ground):
- the learner's parameters after `steps` calls of `train_step(0..steps-1)` from the initial
  weights (and the baseline's, as a sanity figure);
- the wall time of every one of those calls, and of the same step of the planted baseline
  (`TrainingStep(planted=True)`, a private model copy on a private copy of the data), measured
  interleaved in this very process so that both see the same machine, load and clock;
- where the baseline's time goes per record_function label (for the diagnosis' evidence);
- what `BOTTLENECK` names, and whether the script started `torch.profiler`.

Timing reasoning: the timed calls are the same calls whose result is compared, so a step cannot
be fast when timed and right when checked. Learner and baseline alternate which goes first, and
the trusted side compares medians, which shrug off a first call that pays for lazy set-up and
the odd descheduling. On CUDA every call is bracketed by `torch.cuda.synchronize()`: kernels are
asynchronous and would otherwise be timed at launch only.
"""

import contextlib
import copy
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from .profiling_problem import (
    LABELS,
    ProfilingScenario,
    TrainingStep,
    flat_params,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
    perf_counter,
)
from .recorder import Recorder

MAX_NAME = 64  # characters of BOTTLENECK kept
SECTION_STEPS = 2  # baseline steps timed section by section, after the comparison


def _describe(value: Any) -> dict[str, str]:
    """What BOTTLENECK holds, as bounded plain strings: a label, a function's name, or a type."""
    if value is None:
        return {"kind": "none", "value": ""}
    if isinstance(value, str):
        return {"kind": "str", "value": value[:MAX_NAME]}
    name = getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str):  # BOTTLENECK = load_batch (the function)
        return {"kind": "function", "value": name[:MAX_NAME]}
    return {"kind": "other", "value": type(value).__name__[:MAX_NAME]}


class ProfilingRecorder(Recorder):
    def __init__(
        self,
        scenario: ProfilingScenario,
        device: torch.device,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        features: torch.Tensor,
        targets: torch.Tensor,
    ) -> None:
        self.scenario = scenario
        self.device = device
        self.model = model
        self.optimizer = optimizer
        # Snapshots taken before the script: whatever it trains while profiling is undone.
        self.initial_model = copy.deepcopy(model.state_dict())
        self.initial_optimizer = copy.deepcopy(optimizer.state_dict())
        # The baseline's own model, optimizer and data: nothing the script does to the
        # learner's objects (in-place normalisation included) reaches it.
        baseline_model = copy.deepcopy(model)
        self.baseline = TrainingStep(
            baseline_model,
            make_optimizer(scenario, baseline_model),
            features.clone(),
            targets.clone(),
            scenario.batch_size,
            planted=True,
        )
        self.baseline.sync = self._sync
        self.profiler_starts = 0
        self.missing = False
        self.bottleneck = _describe(None)
        self.learner_times: list[float] = []
        self.baseline_times: list[float] = []
        self.section_times: dict[str, float] = {}
        self.params: torch.Tensor | None = None
        self.baseline_params: torch.Tensor | None = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Counts profiler sessions the script starts (`with profile(...)` calls `start()`)."""
        patched: list[tuple[type, str, Any]] = []

        def counting(cls: type, name: str) -> None:
            original = cls.__dict__.get(name)
            if original is None:
                return

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                self.profiler_starts += 1
                return original(*args, **kwargs)

            patched.append((cls, name, original))
            setattr(cls, name, wrapper)

        counting(torch.profiler.profile, "start")
        counting(torch.autograd.profiler.profile, "__enter__")
        try:
            yield
        finally:
            for cls, name, original in patched:
                setattr(cls, name, original)

    def _timed(self, call: Callable[[int], Any], step: int) -> float:
        self._sync()
        started = perf_counter()
        call(step)
        self._sync()
        return perf_counter() - started

    def after_script(self, names: dict[str, Any]) -> None:
        self.bottleneck = _describe(names.get("BOTTLENECK"))
        train_step = names.get("train_step")
        if not callable(train_step):
            self.missing = True
            return
        self.model.load_state_dict(self.initial_model)
        self.optimizer.load_state_dict(self.initial_optimizer)  # empty state: a fresh optimizer
        for step in range(self.scenario.steps):
            # Alternate who goes first, so neither always runs on a cache the other warmed.
            learner_first = step % 2 == 0
            if not learner_first:
                self.baseline_times.append(self._timed(self.baseline, step))
            self.learner_times.append(self._timed(train_step, step))
            if learner_first:
                self.baseline_times.append(self._timed(self.baseline, step))
        self.params = flat_params(self.model)
        self.baseline_params = flat_params(self.baseline.model)
        self.baseline.section_times = self.section_times
        for step in range(self.scenario.steps, self.scenario.steps + SECTION_STEPS):
            self.baseline(step)
        self.baseline.section_times = None

    def observations(self, prefix: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors = {}
        if self.params is not None and self.baseline_params is not None:
            tensors = {f"{prefix}.params": self.params, f"{prefix}.baseline": self.baseline_params}
        meta = {
            "missing": self.missing,
            "bottleneck": self.bottleneck,
            "profiler_starts": self.profiler_starts,
            "learner_times": [_finite(t) for t in self.learner_times],
            "baseline_times": [_finite(t) for t in self.baseline_times],
            "section_times": {
                label: _finite(self.section_times.get(label, 0.0)) for label in LABELS
            },
        }
        return tensors, meta


def _finite(value: float) -> float:
    """JSON has no inf/nan: anything odd becomes -1, which the trusted side rejects."""
    return float(value) if math.isfinite(value) else -1.0


def setup(
    scenario_data: dict, device: torch.device, dtype: torch.dtype
) -> tuple[dict[str, Any], ProfilingRecorder]:
    """The learner's globals for one scenario, and the recorder watching them."""
    scenario = ProfilingScenario.from_dict(scenario_data)
    x, y = make_data(scenario)
    features, targets = x.to(device, dtype), y.to(device)
    model = make_model(scenario).to(device, dtype)
    optimizer = make_optimizer(scenario, model)
    recorder = ProfilingRecorder(scenario, device, model, optimizer, features, targets)
    names = {
        "model": model,
        "loss_fn": make_loss_fn(),
        "optimizer": optimizer,
        "features": features,
        "targets": targets,
        "batch_size": scenario.batch_size,
        "device": device,
        "torch": torch,
        "nn": nn,
    }
    return names, recorder
