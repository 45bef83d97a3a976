"""Trusted grading of gradient accumulation: compare every update with the full-batch reference.

For each hidden scenario the sandbox recorded, at every optimizer.step(), the gradients and
parameters the update was about to use and how many micro-batches the loader had yielded. Here
the same problem is rebuilt from its seed (`AccumulationProblem`) and:

1. each update's gradient is compared with its window's full-batch gradient, evaluated at the
   parameters the learner actually had (so one mistake is not blamed twice);
2. the parameters after every update are compared with a full-batch reference run;
3. for a diagnosis, each micro-batch's own gradient is computed at the parameters in effect when
   it was consumed, and least squares gives the weight every micro-batch received in each update.
   A correct loop gives each micro-batch of a window its share of the window's loss terms
   (1/accum_steps for equal micro-batches, its valid tokens / the window's for padded tokens);
   every classic mistake leaves its own pattern (x accum_steps, leaks from earlier windows, only
   the last micro-batch, equal weights for unequal token counts...).

Numerics: the sandbox runs float64 on the CPU (agreement ~1e-15) and float32 without TF32 on CUDA
(~3e-7 measured on an H200); the tolerances below sit orders of magnitude above that and orders
of magnitude below any mistake (the smallest, a mis-scaled partial window, is off by 25%+).
"""

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gradlab.content.loader import Content
from gradlab.results import Check, Diagnosis
from worker.graders.accumulation_problem import AccumulationProblem
from worker.graders.base import Judgement, ScenarioGrader
from worker.harness.problems import AccumulationScenario
from worker.messages import message
from worker.observations import BadObservations, Observations

TOLERANCE = {"cpu": 1e-6, "cuda": 1e-3}  # relative, on gradients and on parameters
SPREAD = 0.02  # weights within 2% of a pattern count as following it
LEAK = 1e-3  # a weight above 0.1% of the window's largest is not noise (solves are exact)
RESIDUAL = 1e-3  # least squares explains the update (else: the update is not a mix of gradients)
CHART_STEPS = 8  # diagnosis.evidence["weights"]: at most this many optimizer steps...
CHART_MICROBATCHES = 32  # ...and micro-batches, rounded to CHART_DIGITS decimals
CHART_DIGITS = 4


def _rel(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    difference = float(torch.linalg.vector_norm(a - b))
    if not math.isfinite(difference):
        return math.inf
    denominator = float(torch.linalg.vector_norm(b if scale is None else scale))
    return difference / max(denominator, 1e-30)


@dataclass
class ScenarioReport:
    number: int
    scenario: AccumulationScenario
    steps: int
    expected_steps: int
    grad_error: float
    param_error: float
    max_forward: int
    diagnosis: tuple[str, dict[str, Any]] | None = None
    weights: dict[str, list[list[float]]] | None = None  # weight_chart(), for a diagnosis


@dataclass
class Recording:
    """One scenario's observations, validated against the rebuilt problem."""

    grads: torch.Tensor  # [recorded steps, width]
    params: torch.Tensor  # [recorded steps, width], just before each update
    final: torch.Tensor  # [width]
    yielded: list[int]  # micro-batches handed out by the loader at each step
    steps: int
    total_yielded: int
    forwards: list[int]

    @classmethod
    def read(cls, obs: Observations, index: int, meta: Any, width: int) -> "Recording":
        if not isinstance(meta, dict) or not isinstance(meta.get("step_meta"), list):
            raise BadObservations(f"scenario {index}: no step records")
        grads = obs.tensor(f"s{index}.grads", dims=2, width=width)
        params = obs.tensor(f"s{index}.params", dims=2, width=width)
        final = obs.tensor(f"s{index}.final", dims=1, width=width)
        try:
            yielded = [int(m["yielded"]) for m in meta["step_meta"]]
            steps, total = int(meta["steps"]), int(meta["yielded"])
            forwards = [int(b) for b in meta.get("forward_batch_sizes", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise BadObservations(f"scenario {index}: malformed step records") from exc
        if not len(yielded) == grads.shape[0] == params.shape[0] or steps < len(yielded):
            raise BadObservations(f"scenario {index}: step records do not line up")
        return cls(grads, params, final, yielded, steps, total, forwards)

    def params_after(self, k: int) -> torch.Tensor:
        return self.params[k + 1] if k + 1 < len(self.yielded) else self.final

    def theta_of(self, j: int) -> torch.Tensor:
        """Parameters in effect when micro-batch j was consumed: those of the first update that
        came after it (params change only at updates)."""
        k = next((k for k, count in enumerate(self.yielded) if count > j), len(self.yielded) - 1)
        return self.params[k]


def analyse(
    number: int, problem: AccumulationProblem, rec: Recording, tol: float
) -> ScenarioReport:
    windows = problem.windows
    compared = min(len(rec.yielded), len(windows))
    grad_error = 0.0 if rec.steps == len(windows) else math.inf
    for k in range(compared):
        reference = problem.reference_gradient(rec.params[k], windows[k])
        grad_error = max(grad_error, _rel(rec.grads[k], reference))
    reference_run = problem.reference_run()
    if rec.steps == len(windows):
        param_error = max(
            _rel(rec.params_after(k), after, scale=after - problem.initial)
            for k, after in enumerate(reference_run)
        )
    else:
        last = reference_run[-1]
        param_error = _rel(rec.final, last, scale=last - problem.initial)
    report = ScenarioReport(
        number,
        problem.scenario,
        rec.steps,
        len(windows),
        grad_error,
        param_error,
        max(rec.forwards, default=0),
    )
    report.diagnosis = diagnose(problem, report, rec, tol)
    if report.diagnosis is not None:
        report.weights = weight_chart(problem, rec)
    return report


def weight_chart(
    problem: AccumulationProblem, rec: Recording
) -> dict[str, list[list[float]]] | None:
    """The weight each micro-batch's loss got in each optimizer step (least squares, as in the
    diagnosis) next to the weights of a correct loop, for the feedback chart:
    `{"steps": [[w_step1_mb1, ...], ...], "expected": [[...], ...]}`, one row per step and one
    column per micro-batch consumed (0 where a step did not use a micro-batch), bounded to
    CHART_STEPS x CHART_MICROBATCHES and rounded. None when the steps do not line up with the
    correct loop's or an update is not a mix of micro-batch gradients (nothing to draw)."""
    windows = problem.windows
    if rec.steps != len(windows) or not rec.yielded or rec.yielded[0] < 1:
        return None
    shown = min(len(windows), CHART_STEPS)
    consumed = rec.yielded[shown - 1]
    if consumed < 1:
        return None
    width = min(max(consumed, windows[shown - 1][-1] + 1), CHART_MICROBATCHES)
    columns = torch.stack(
        [problem.microbatch_gradient(rec.theta_of(j), j) for j in range(consumed)], 1
    )
    steps, expected = [], []
    for k in range(shown):
        count = rec.yielded[k]
        target = rec.grads[k]
        solved = torch.linalg.lstsq(columns[:, :count], target.unsqueeze(1)).solution.squeeze(1)
        if _rel(columns[:, :count] @ solved, target) > RESIDUAL:
            return None
        row = [0.0] * width
        for j, value in enumerate(solved.tolist()[:width]):
            row[j] = value
        correct = [0.0] * width
        for j, value in zip(windows[k], problem.expected_weights(windows[k]).tolist(), strict=True):
            if j < width:
                correct[j] = value
        steps.append([_round(v) for v in row])
        expected.append([_round(v) for v in correct])
    return {"steps": steps, "expected": expected}


def _round(value: float) -> float:
    if not math.isfinite(value):
        return 0.0
    return round(value, CHART_DIGITS) + 0.0  # + 0.0: no -0.0 in the JSON


def diagnose(
    problem: AccumulationProblem, report: ScenarioReport, rec: Recording, tol: float
) -> tuple[str, dict[str, Any]] | None:
    s = problem.scenario
    a = s.accum_steps
    expected_sizes = [len(w) for w in problem.windows]
    if report.steps == 0:
        return "never_stepped", {"microbatches": rec.total_yielded}
    if report.max_forward > s.micro_batch_size:
        return "microbatches_not_used", {
            "batch_size": report.max_forward,
            "micro_batch_size": s.micro_batch_size,
        }
    observed_sizes = [rec.yielded[0], *(b - a_ for a_, b in itertools.pairwise(rec.yielded))]
    if a > 1 and report.steps == rec.total_yielded > report.expected_steps:
        return "stepped_every_microbatch", {
            "steps": report.steps,
            "expected_steps": report.expected_steps,
        }
    leftover = s.microbatches % a
    full = s.microbatches // a
    if leftover and report.steps == full and observed_sizes == expected_sizes[:full]:
        return "partial_cycle_dropped", {"leftover": leftover}
    if report.steps != report.expected_steps:
        return "wrong_step_count", {"steps": report.steps, "expected_steps": report.expected_steps}
    if report.grad_error <= tol and report.param_error <= tol:
        return None  # right updates, however the loop fetched its micro-batches
    if observed_sizes != expected_sizes:
        expected = str(a) if len(set(expected_sizes)) == 1 else ", ".join(map(str, expected_sizes))
        return "step_off_by_one", {
            "observed": ", ".join(map(str, observed_sizes)),
            "expected": expected,
        }
    found = _diagnose_weights(problem, rec, tol)
    if found is not None:
        return found
    if report.grad_error > tol:
        return "gradients_mismatch", {"rel_error": f"{report.grad_error:.2g}"}
    return "parameters_mismatch", {"rel_error": f"{report.param_error:.2g}"}


def _diagnose_weights(
    problem: AccumulationProblem, rec: Recording, tol: float
) -> tuple[str, dict[str, Any]] | None:
    """Solve for the weight each micro-batch got in each update and match known patterns."""
    a = problem.scenario.accum_steps
    consumed = rec.yielded[-1]
    columns = torch.stack(
        [problem.microbatch_gradient(rec.theta_of(j), j) for j in range(consumed)], 1
    )
    for k, window in enumerate(problem.windows):
        count = rec.yielded[k]
        target = rec.grads[k]
        weights = torch.linalg.lstsq(columns[:, :count], target.unsqueeze(1)).solution.squeeze(1)
        if _rel(columns[:, :count] @ weights, target) > RESIDUAL:
            return None  # the update is not a mix of micro-batch gradients
        inside, earlier = weights[window[0] : window[-1] + 1], weights[: window[0]]
        largest = float(inside.abs().max())
        if largest == 0.0:
            return None
        if earlier.numel() and float(earlier.abs().max()) > LEAK * largest:
            return "grads_never_cleared", {"step": k + 1}
        if len(window) > 1 and float(inside[:-1].abs().max()) < LEAK * largest:
            return "zeroed_every_microbatch", {"accum_steps": a}
        expected = problem.expected_weights(window)
        ratio = float(inside @ expected / (expected @ expected))
        if _rel(inside, ratio * expected) <= SPREAD:
            if abs(ratio - 1) <= 10 * tol:
                continue  # this update is right; look at the next one
            if len(window) < a and abs(ratio - len(window) / a) <= SPREAD * ratio:
                return "partial_cycle_misscaled", {"leftover": len(window), "accum_steps": a}
            if a > 1 and abs(ratio - a) <= SPREAD * a:
                return "loss_not_scaled", {"ratio": round(ratio, 1), "accum_steps": a}
            return "wrong_loss_scale", {"ratio": float(f"{ratio:.3g}"), "accum_steps": a}
        uniform = torch.full_like(inside, float(inside.mean()))
        if problem.tokens and _rel(inside, uniform) <= SPREAD:
            return "token_mean_of_means", {}
        return None
    return None


def _batchnorm_error(problem: AccumulationProblem, rec: Recording) -> float:
    """How far the learner's updates are from the full batch on a BatchNorm model."""
    return max(
        _rel(rec.grads[k], problem.reference_gradient(rec.params[k], window))
        for k, window in enumerate(problem.windows)
    )


def _micro_batch_size(report: ScenarioReport) -> int:
    return report.scenario.micro_batch_size


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
        "steps",
        lambda r, _tol: r.steps == r.expected_steps,
        lambda r: {"scenario": r.number, "steps": r.steps, "expected": r.expected_steps},
    ),
    (
        "microbatches",
        1.0,
        "microbatches",
        lambda r, _tol: r.max_forward <= _micro_batch_size(r),
        lambda r: {"batch_size": r.max_forward, "micro_batch_size": _micro_batch_size(r)},
    ),
    (
        "gradients",
        2.0,
        "gradients",
        lambda r, tol: r.grad_error <= tol,
        lambda r: {"scenario": r.number, "error": _fmt(r.grad_error)},
    ),
    (
        "parameters",
        1.0,
        "parameters",
        lambda r, tol: r.param_error <= tol,
        lambda r: {"scenario": r.number, "error": _fmt(r.param_error)},
    ),
]


def _checks(
    reports: list[ScenarioReport], *, exercise: str, locale: str, content: Content, tol: float
) -> list[Check]:
    """Named checks with partial credit; a failing check speaks of its first failing scenario."""
    ok = message(locale, "check.runs.ok")
    checks = [Check(id="runs", passed=True, points=1.0, max_points=1.0, message=ok)]
    for check_id, points, key, passes, values in _CHECK_RULES:
        bad = next((r for r in reports if not passes(r, tol)), None)
        text = content.exercise_message(
            exercise=exercise,
            locale=locale,
            group="checks",
            key=f"{key}.ok" if bad is None else f"{key}.bad",
            values=None if bad is None else values(bad),
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


MESSAGES = {
    **{
        f"diagnoses.{code}": frozenset(fields)
        for code, fields in {
            "loss_not_scaled": {"ratio", "accum_steps"},
            "wrong_loss_scale": {"ratio", "accum_steps"},
            "zeroed_every_microbatch": {"accum_steps"},
            "stepped_every_microbatch": {"steps", "expected_steps"},
            "step_off_by_one": {"observed", "expected"},
            "grads_never_cleared": {"step"},
            "never_stepped": {"microbatches"},
            "microbatches_not_used": {"batch_size", "micro_batch_size"},
            "wrong_step_count": {"steps", "expected_steps"},
            "gradients_mismatch": {"rel_error"},
            "parameters_mismatch": {"rel_error"},
            "partial_cycle_dropped": {"leftover"},
            "partial_cycle_misscaled": {"leftover", "accum_steps"},
            "token_mean_of_means": set(),
        }.items()
    },
    **{
        f"checks.{key}.ok": frozenset()
        for key in ("steps", "microbatches", "gradients", "parameters")
    },
    "checks.steps.bad": frozenset({"scenario", "steps", "expected"}),
    "checks.microbatches.bad": frozenset({"batch_size", "micro_batch_size"}),
    "checks.gradients.bad": frozenset({"scenario", "error"}),
    "checks.parameters.bad": frozenset({"scenario", "error"}),
    "checks.batchnorm.note": frozenset({"error"}),
}


class AccumulationGrader(ScenarioGrader):
    """One gradient-accumulation exercise: its hidden scenarios, judged as described above."""

    harness = "accumulation"
    messages = MESSAGES

    def judge(
        self, observations: Observations, *, exercise: str, locale: str, content: Content
    ) -> Judgement:
        tol = TOLERANCE["cuda" if observations.meta.get("device") == "cuda" else "cpu"]
        reports, notes = [], []
        for index, (spec, meta) in enumerate(self.scenario_records(observations)):
            problem = AccumulationProblem(AccumulationScenario.from_dict(spec))
            recording = Recording.read(observations, index, meta, problem.width)
            if problem.scenario.informational:
                if recording.steps == len(problem.windows):
                    notes.append(_batchnorm_error(problem, recording))
                continue
            reports.append(analyse(len(reports) + 1, problem, recording, tol))
        checks = _checks(reports, exercise=exercise, locale=locale, content=content, tol=tol)
        if notes and all(check.passed for check in checks):
            text = content.exercise_message(
                exercise=exercise,
                locale=locale,
                group="checks",
                key="batchnorm.note",
                values={"error": f"{100 * max(notes):.0f}"},
            )
            checks.append(
                Check(id="batchnorm_note", passed=True, points=0.0, max_points=0.0, message=text)
            )
        return Judgement(
            checks=checks,
            diagnosis=_diagnosis(reports, exercise=exercise, locale=locale, content=content),
            details={
                "grad_errors": [r.grad_error for r in reports],
                "param_errors": [r.param_error for r in reports],
                "batchnorm_rel_error": max(notes) if notes else None,
            },
        )


def _diagnosis(
    reports: list[ScenarioReport], *, exercise: str, locale: str, content: Content
) -> Diagnosis | None:
    report = next((r for r in reports if r.diagnosis is not None), None)
    if report is None or report.diagnosis is None:
        return None
    code, evidence = report.diagnosis
    text = content.exercise_message(
        exercise=exercise, locale=locale, group="diagnoses", key=code, values=evidence
    )
    extra = {"weights": report.weights} if report.weights is not None else {}
    return Diagnosis(
        code=code, message=text, evidence={"scenario": report.number, **evidence, **extra}
    )
