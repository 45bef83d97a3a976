"""In-sandbox setup for `profiling/find-the-bottleneck`: the learner's names, a recorder that
times the learner's `train_step` through the worker's clock, and the trusted baseline phase.

Timing (worker/pool.py `PhaseClock`): after the script, the recorder tells the worker it is
ready; the worker notes the phase cgroup's CPU time and answers "go" with a fresh nonce; the
recorder loads fresh initial weights chosen by that nonce into `model`, resets the optimizer,
runs `train_step` `steps` times from a step the nonce also chooses, and answers "done" with the
weights. The worker notes the CPU time again. So the work is measured by the kernel, outside
this process, and the trusted side recomputes the weights from the nonce: a step cannot be fast
when timed and right when checked, nor be computed before it is timed.

The planted baseline runs the same way in its own trusted phase (`baseline`): a process of the
slot with no learner code, so nothing a script does can slow it down.

Output: the learner reads the profiler table in what the script printed, so the result shows one
run, as if the script had run once: the first scenario's (the script, then the timed steps).
The other scenarios' stdout is dropped; their stderr is kept, since a warning or an error may
happen in one scenario only. Kineto, the profiler's C++ backend, logs a line on every start and
stop ("profiler_start", "STAGE: ...", CUPTI notices on CUDA) to stderr; the harness silences it
before the script runs, so "errors and warnings" holds only what the script itself caused.
Nothing printed is read by the grader either way.
"""

import contextlib
import copy
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ...context import Context
from ...recorder import Recorder
from ...seeding import init_weights
from .problem import (
    LABELS,
    ProfilingScenario,
    TrainingStep,
    flat_params,
    fresh_start,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
    perf_counter,
)

MAX_NAME = 64  # characters of BOTTLENECK kept
SECTION_STEPS = 2  # baseline steps timed section by section, for the feedback
# The scenario whose stdout is shown: the learner phase runs every scenario, this one first
# (grader.py `phases`).
SHOWN_SCENARIO = 0
# Kineto's logging threshold, read once, when the process first starts a profiler: its levels
# run from VERBOSE (0) to USDT (5, the "profiler_start"/"profiler_stop" lines), so 6 is silence.
# A script may still set its own before it profiles.
KINETO_QUIET = {"KINETO_LOG_LEVEL": "6"}


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


def timed_training(
    ctx: Context,
    scenario: ProfilingScenario,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    initial_optimizer: dict[str, Any],
    step: Callable[[int], Any],
) -> None:
    """One timed block: fresh weights and start step from the worker's nonce, the optimizer
    as it was before the script ran, `steps` calls of `step`, the weights back as float64
    bytes."""

    def work(nonce: int) -> bytes:
        seed, first = fresh_start(scenario, nonce)
        init_weights(model, seed)
        optimizer.load_state_dict(initial_optimizer)  # empty state: a fresh optimizer
        for offset in range(scenario.steps):
            step(first + offset)
        return flat_params(model).numpy().tobytes()

    ctx.clock.timed(work, tag=ctx.index)


class ProfilingRecorder(Recorder):
    def __init__(
        self,
        scenario: ProfilingScenario,
        ctx: Context,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
    ) -> None:
        self.scenario = scenario
        self.ctx = ctx
        self.model = model
        self.optimizer = optimizer
        # before the script: whatever it trains while profiling is undone for the timed run
        self.initial_optimizer = copy.deepcopy(optimizer.state_dict())
        self.profiler_starts = 0
        self.missing = False
        self.bottleneck = _describe(None)

    @contextlib.contextmanager
    def _shown(self) -> Iterator[None]:
        """The learner's stdout for the shown scenario, dropped for the others."""
        if self.ctx.index == SHOWN_SCENARIO:
            yield
            return
        sys.stdout.flush()
        # a real file, so that a script that asks for `sys.stdout.fileno()` runs the same way
        with open(os.devnull, "w", encoding="utf-8") as sink, contextlib.redirect_stdout(sink):
            yield

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
            with self._shown():
                yield
        finally:
            for cls, name, original in patched:
                setattr(cls, name, original)

    def after_script(self, names: dict[str, Any]) -> None:
        self.bottleneck = _describe(names.get("BOTTLENECK"))
        train_step = names.get("train_step")
        if not callable(train_step):
            self.missing = True
            return
        with self._shown():
            timed_training(
                self.ctx,
                self.scenario,
                self.model,
                self.optimizer,
                self.initial_optimizer,
                train_step,
            )

    def observations(self, prefix: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        del prefix
        meta = {
            "missing": self.missing,
            "bottleneck": self.bottleneck,
            "profiler_starts": self.profiler_starts,
        }
        return {}, meta


def _problem(scenario: ProfilingScenario, ctx: Context) -> dict[str, Any]:
    x, y = make_data(scenario)
    model = make_model(scenario).to(ctx.device, ctx.dtype)
    return {
        "model": model,
        "optimizer": make_optimizer(scenario, model),
        "features": x.to(ctx.device, ctx.dtype),
        "targets": y.to(ctx.device),
    }


def setup(scenario_data: dict, ctx: Context) -> tuple[dict[str, Any], ProfilingRecorder]:
    """The learner's globals for one scenario, and the recorder watching them."""
    for name, value in KINETO_QUIET.items():
        os.environ.setdefault(name, value)
    scenario = ProfilingScenario.from_dict(scenario_data)
    problem = _problem(scenario, ctx)
    recorder = ProfilingRecorder(scenario, ctx, problem["model"], problem["optimizer"])
    names = {
        **problem,
        "loss_fn": make_loss_fn(),
        "batch_size": scenario.batch_size,
        "device": ctx.device,
        "torch": torch,
        "nn": nn,
    }
    return names, recorder


def baseline(scenario_data: dict, ctx: Context) -> tuple[dict[str, Any], dict[str, Any]]:
    """Trusted phase: the planted step timed exactly as the learner's is, then where its time
    goes section by section (for the feedback: no learner code is in this process)."""
    scenario = ProfilingScenario.from_dict(scenario_data)
    problem = _problem(scenario, ctx)
    planted = TrainingStep(
        problem["model"],
        problem["optimizer"],
        problem["features"],
        problem["targets"],
        scenario.batch_size,
        planted=True,
    )
    if ctx.device.type == "cuda":
        planted.sync = lambda: torch.cuda.synchronize(ctx.device)
    optimizer = problem["optimizer"]
    timed_training(
        ctx, scenario, problem["model"], optimizer, copy.deepcopy(optimizer.state_dict()), planted
    )
    sections: dict[str, float] = {}
    planted.section_times = sections
    started = perf_counter()
    for step in range(SECTION_STEPS):
        planted(step)
    total = perf_counter() - started
    return {}, {"section_share": {label: sections.get(label, 0.0) / total for label in LABELS}}
