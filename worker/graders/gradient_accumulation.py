"""Trusted grading of gradient accumulation: compare every update with the full-batch reference.

For each hidden scenario the sandbox recorded, at every optimizer.step(), the gradients and
parameters the update was about to use and how many micro-batches the loader had yielded. Here
the same problem is rebuilt from its seed (the data and initial weights never come from the
sandbox) and:

1. each update's gradient is compared with the mean gradient of its accumulation window,
   evaluated at the parameters the learner actually had (so one mistake is not blamed twice);
2. the final parameters are compared with a full-batch reference run from the same start;
3. for a diagnosis, each micro-batch's own gradient is computed at the parameters in effect when
   it was consumed, and least squares gives the weight every micro-batch received in each update:
   a correct loop gives 1/accum_steps to each micro-batch of its own cycle, and every classic
   mistake leaves its own pattern (weights of 1, leaks into earlier cycles, only the last one...).

Numerics: the sandbox runs float64 on the CPU (agreement ~1e-15) and float32 without TF32 on CUDA
(~3e-7 measured on an H200); the tolerances below sit orders of magnitude above that and orders
of magnitude below any mistake (the smallest, a mis-scaled loss, is off by a factor).
"""

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from gradlab.content.loader import Content
from gradlab.results import Check, Diagnosis
from worker.graders.base import Judgement
from worker.harness.problems import (
    AccumulationScenario,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
)
from worker.messages import message
from worker.observations import BadObservations, Observations

TOLERANCE = {"cpu": 1e-6, "cuda": 1e-3}  # relative, on gradients and on parameters
WEIGHT_SPREAD = 0.02  # weights within 2% of each other count as "equal"

SCENARIOS: list[dict[str, Any]] = [
    {
        "seed": 11,
        "accum_steps": 4,
        "microbatches": 8,
        "micro_batch_size": 4,
        "optimizer": "sgd",
        "lr": 0.1,
    },
    {
        "seed": 23,
        "accum_steps": 3,
        "microbatches": 9,
        "micro_batch_size": 2,
        "optimizer": "adam",
        "lr": 0.01,
    },
    {
        "seed": 37,
        "accum_steps": 1,
        "microbatches": 3,
        "micro_batch_size": 5,
        "optimizer": "sgd",
        "lr": 0.05,
    },
]


def _rel(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    denominator = float(torch.linalg.vector_norm(b if scale is None else scale))
    difference = float(torch.linalg.vector_norm(a - b))
    if not math.isfinite(difference):
        return math.inf
    return difference / max(denominator, 1e-30)


class Problem:
    """One scenario rebuilt on trusted ground, float64 on the CPU."""

    def __init__(self, scenario: AccumulationScenario) -> None:
        self.scenario = scenario
        self.x, self.y = make_data(scenario)
        self.model = make_model(scenario)
        self.initial = parameters_to_vector(self.model.parameters()).detach().clone()
        self.width = self.initial.numel()
        self.loss_fn = make_loss_fn()

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        size = self.scenario.micro_batch_size
        start = (index % self.scenario.microbatches) * size
        return self.x[start : start + size], self.y[start : start + size]

    def gradient(self, theta: torch.Tensor, indices: range | list[int]) -> torch.Tensor:
        """Mean over `indices` of each micro-batch's mean-loss gradient, at parameters theta."""
        vector_to_parameters(theta, self.model.parameters())
        params = list(self.model.parameters())
        total = torch.zeros(self.width, dtype=torch.float64)
        for index in indices:
            x, y = self.batch(index)
            grads = torch.autograd.grad(self.loss_fn(self.model(x), y), params)
            total += torch.cat([g.reshape(-1) for g in grads])
        return total / max(len(indices), 1)

    def reference_final(self) -> torch.Tensor:
        """Parameters after one pass of full-batch steps, one per accumulation window."""
        s = self.scenario
        model = make_model(s)
        optimizer = make_optimizer(s, model)
        for k in range(s.microbatches // s.accum_steps):
            theta = parameters_to_vector(model.parameters()).detach().clone()
            grad = self.gradient(theta, range(k * s.accum_steps, (k + 1) * s.accum_steps))
            offset = 0
            for p in model.parameters():
                p.grad = grad[offset : offset + p.numel()].view_as(p).clone()
                offset += p.numel()
            optimizer.step()
        return parameters_to_vector(model.parameters()).detach().clone()


@dataclass
class ScenarioReport:
    number: int
    steps: int
    expected_steps: int
    grad_error: float
    param_error: float
    max_forward: int
    diagnosis: tuple[str, dict[str, Any]] | None


def _analyse(number: int, problem: Problem, obs: Observations, meta: dict, tol: float):
    s = problem.scenario
    a = s.accum_steps
    prefix = f"s{number - 1}"
    grads = obs.tensor(f"{prefix}.grads", dims=2, width=problem.width)
    params = obs.tensor(f"{prefix}.params", dims=2, width=problem.width)
    final = obs.tensor(f"{prefix}.final", dims=1, width=problem.width)
    step_meta = meta.get("step_meta")
    if not isinstance(step_meta, list) or len(step_meta) != grads.shape[0] != params.shape[0]:
        raise BadObservations("step records do not line up")
    yielded = [int(m["yielded"]) for m in step_meta]
    steps = int(meta.get("steps", len(yielded)))
    total_yielded = int(meta.get("yielded", 0))
    forwards = [int(b) for b in meta.get("forward_batch_sizes", [])]
    expected_steps = s.microbatches // a

    # 1. each update against its window's mean gradient, at the learner's own parameters
    compared = min(len(yielded), expected_steps)
    grad_error = 0.0 if steps == expected_steps else math.inf
    for k in range(compared):
        reference = problem.gradient(params[k], range(k * a, (k + 1) * a))
        grad_error = max(grad_error, _rel(grads[k], reference))
    # 2. the whole run against the reference run
    reference_final = problem.reference_final()
    param_error = _rel(final, reference_final, scale=reference_final - problem.initial)

    report = ScenarioReport(
        number, steps, expected_steps, grad_error, param_error, max(forwards, default=0), None
    )
    report.diagnosis = _diagnose(problem, report, grads, params, yielded, total_yielded, tol)
    return report


def _diagnose(
    problem: Problem,
    report: ScenarioReport,
    grads: torch.Tensor,
    params: torch.Tensor,
    yielded: list[int],
    total_yielded: int,
    tol: float,
) -> tuple[str, dict[str, Any]] | None:
    s = problem.scenario
    a = s.accum_steps
    if report.steps == 0:
        return "never_stepped", {"microbatches": total_yielded}
    if report.max_forward > s.micro_batch_size:
        return "microbatches_not_used", {
            "batch_size": report.max_forward,
            "micro_batch_size": s.micro_batch_size,
        }
    if a > 1 and report.steps == total_yielded:
        return "stepped_every_microbatch", {
            "steps": report.steps,
            "expected_steps": report.expected_steps,
        }
    if report.steps != report.expected_steps:
        return "wrong_step_count", {"steps": report.steps, "expected_steps": report.expected_steps}
    windows = [yielded[0], *(b - a_ for a_, b in itertools.pairwise(yielded))]
    if any(size != a for size in windows):
        return "step_off_by_one", {"observed": ", ".join(map(str, windows)), "expected": a}
    if report.grad_error <= tol and report.param_error <= tol:
        return None

    # Weight of each micro-batch in each update: its gradient at the parameters in effect when
    # it was consumed (the params recorded at the first step after it), solved by least squares.
    def theta_of(j: int) -> torch.Tensor:
        k = next((k for k, count in enumerate(yielded) if count > j), len(yielded) - 1)
        return params[k]

    columns = torch.stack([problem.gradient(theta_of(j), [j]) for j in range(yielded[-1])], 1)
    for k, count in enumerate(yielded):
        target = grads[k]
        weights = torch.linalg.lstsq(columns[:, :count], target.unsqueeze(1)).solution.squeeze(1)
        residual = _rel(columns[:, :count] @ weights, target)
        window = weights[count - a : count]
        earlier = weights[: count - a]
        scale = float(window.abs().max())
        if residual > 1e-3 or scale == 0.0:
            break
        if earlier.numel() and float(earlier.abs().max()) > 0.05 * scale:
            return "grads_never_cleared", {"step": k + 1}
        if a > 1 and float(window[:-1].abs().max()) < 0.05 * scale:
            return "zeroed_every_microbatch", {"accum_steps": a}
        mean = float(window.mean())
        if float((window - mean).abs().max()) <= WEIGHT_SPREAD * abs(mean):
            ratio = mean * a
            if abs(ratio - 1) <= 10 * tol:
                continue  # this update is right; look at the next one
            if a > 1 and abs(ratio - a) <= WEIGHT_SPREAD * a:
                return "loss_not_scaled", {"ratio": f"{ratio:.1f}", "accum_steps": a}
            return "wrong_loss_scale", {"ratio": f"{ratio:.3g}", "accum_steps": a}
        break
    if report.grad_error > tol:
        return "gradients_mismatch", {"rel_error": f"{report.grad_error:.2g}"}
    return "parameters_mismatch", {"rel_error": f"{report.param_error:.2g}"}


class AccumulateGrader:
    """gradient-accumulation/accumulate: equal micro-batches, counts divisible by accum_steps."""

    harness = "accumulation"

    def scenarios(self) -> list[dict[str, Any]]:
        return SCENARIOS

    def judge(
        self, observations: Observations, *, exercise: str, locale: str, content: Content
    ) -> Judgement:
        device = observations.meta.get("device")
        tol = TOLERANCE["cuda" if device == "cuda" else "cpu"]
        metas = observations.meta.get("scenarios")
        if not isinstance(metas, list) or len(metas) != len(SCENARIOS):
            raise BadObservations("one record per scenario expected")
        reports = [
            _analyse(n, Problem(AccumulationScenario.from_dict(spec)), observations, meta, tol)
            for n, (spec, meta) in enumerate(zip(SCENARIOS, metas, strict=True), start=1)
        ]
        return Judgement(
            checks=_checks(reports, locale, tol),
            diagnosis=_diagnosis(reports, exercise=exercise, locale=locale, content=content),
            details={"reports": [r.__dict__ for r in reports]},
        )


def _micro_batch_size(report: ScenarioReport) -> int:
    return int(SCENARIOS[report.number - 1]["micro_batch_size"])


# (check id, points, message key, passes, values for the failure message)
_CHECK_RULES: list[
    tuple[
        str,
        float,
        str,
        Callable[[ScenarioReport, float], bool],
        Callable[[ScenarioReport], dict[str, Any]],
    ]
] = [
    (
        "step_count",
        1.0,
        "check.steps",
        lambda r, _tol: r.steps == r.expected_steps,
        lambda r: {"scenario": r.number, "steps": r.steps, "expected": r.expected_steps},
    ),
    (
        "microbatches",
        1.0,
        "check.microbatches",
        lambda r, _tol: r.max_forward <= _micro_batch_size(r),
        lambda r: {"batch_size": r.max_forward, "micro_batch_size": _micro_batch_size(r)},
    ),
    (
        "gradients",
        2.0,
        "check.gradients",
        lambda r, tol: r.grad_error <= tol,
        lambda r: {"scenario": r.number, "error": _fmt(r.grad_error)},
    ),
    (
        "parameters",
        1.0,
        "check.parameters",
        lambda r, tol: r.param_error <= tol,
        lambda r: {"scenario": r.number, "error": _fmt(r.param_error)},
    ),
]


def _checks(reports: list[ScenarioReport], locale: str, tol: float) -> list[Check]:
    """Named checks with partial credit; a failing check speaks of its first failing scenario."""
    checks = [
        Check(
            id="runs",
            passed=True,
            points=1.0,
            max_points=1.0,
            message=message(locale, "check.runs.ok"),
        )
    ]
    for check_id, points, key, passes, values in _CHECK_RULES:
        bad = next((r for r in reports if not passes(r, tol)), None)
        text = (
            message(locale, f"{key}.ok")
            if bad is None
            else message(locale, f"{key}.bad", **values(bad))
        )
        checks.append(
            Check(
                id=check_id,
                passed=bad is None,
                points=points if bad is None else 0.0,
                max_points=points,
                message=text,
            )
        )
    return checks


def _fmt(error: float) -> str:
    return "∞" if not math.isfinite(error) else f"{error:.2g}"


def _diagnosis(
    reports: list[ScenarioReport], *, exercise: str, locale: str, content: Content
) -> Diagnosis | None:
    report = next((r for r in reports if r.diagnosis is not None), None)
    if report is None:
        return None
    code, evidence = report.diagnosis  # type: ignore[misc]
    template = content.diagnosis_message(exercise=exercise, locale=locale, code=code) or code
    try:
        text = template.format(**evidence)
    except (KeyError, IndexError, ValueError):
        text = template  # a translator's placeholder typo must not break grading
    return Diagnosis(code=code, message=text, evidence={"scenario": report.number, **evidence})
