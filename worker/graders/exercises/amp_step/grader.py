"""Trusted grading of `mixed-precision/amp-step`: an autocast + GradScaler training loop.

For each hidden scenario the sandbox recorded (worker/harness/exercises/amp_step): at every real
optimizer.step() the gradients and parameters it used, parameter snapshots at every batch, and,
for feedback, a log of the AMP calls per batch, autocast flags and the scale. Here the problem is
rebuilt from its seed (`AmpProblem`) and every check compares those recorded values with values
recomputed here at the learner's own parameters:

- `autocast`: the low-precision witness. Each step's unscaled gradient is recomputed twice, by
  a float32 model with the forward under CPU autocast in the lesson's low-precision dtype, and
  by the same model in plain float32. A loop whose forward really ran in low precision matches
  the first to rounding noise and sits measurably away from the second; a forward that only
  looked autocast (patched `is_autocast_enabled`, a decoy call, autocast switched off by a
  hook) matches the second. Autocast flags seen inside the process only explain the failure.
- `order`: scale -> backward -> unscale_ -> clip, read off the numbers: every update's gradient
  norm is min(max_norm, |unscaled gradient|). Clipping the scaled gradient, a backward that was
  not scaled, no clipping, or a second unscale each give another norm.
- `inf_step`: the poisoned batch left the parameters finite and unchanged (the numbers a skipped
  step gives; the scale backing off changes no number in bfloat16, so it is feedback only).
- `gradients`: one real optimizer.step() per finite batch, each with the unscaled, clipped
  gradient of its batch, evaluated at the parameters the learner had (on the CPU the autocast
  recomputation, which a correct loop matches exactly; on CUDA a float64 one).
- `parameters`: the final parameters against the float64 run that skips the poisoned batch.

Numerics (bench/RESULTS.md "amp-step witness"): on the CPU (bfloat16, unit roundoff 2^-8) a
correct loop's gradients sit within WITNESS_MATCH of the autocast reference (rounding order
only) and their float32 counterpart is ~WITNESS_APART further away; GRAD_TOL/PARAM_TOL compare
with float64 and leave several times the bfloat16 error. On CUDA the dtype is float16 and the
autocast reference is still computed on the CPU: its kernels round differently from cuBLAS's,
so the witness there is not yet calibrated (scripts/gpu_check.sh measures it).
"""

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from worker.graders.exercises.amp_step.recording import SHOWN, Recording
from worker.graders.exercises.amp_step.reference import AmpProblem, clip
from worker.graders.kit import (
    ExerciseGrader,
    Finding,
    GradedRun,
    Judgement,
    Texts,
    first,
    first_finding,
    make_check,
    per_thread,
    rel,
    runs_check,
)
from worker.harness.exercises.amp_step.problem import AmpScenario

problem_of = per_thread(AmpProblem)

# relative errors; see the module docstring and the measurements in bench/RESULTS.md
GRAD_TOL = {"cpu": 0.03, "cuda": 0.03}
PARAM_TOL = {"cpu": 0.02, "cuda": 0.02}
NORM_TOL = 0.01  # |norm of the update's gradient - min(max_norm, |unscaled|)| / that
# The witness, per step, relative to how far the two references are apart (`gap`): the
# learner's gradient must be within WITNESS_MATCH x gap of the autocast reference, and at
# least WITNESS_APART x gap away from the float32 one.
WITNESS_MATCH = 0.25
WITNESS_APART = 0.5
AMP_DTYPE = {"cpu": torch.bfloat16, "cuda": torch.float16}
EXPECTED_ORDER = ("scale", "backward", "unscale", "clip", "step", "update")
SCALER_KINDS = {"scale", "unscale", "step", "update"}


@dataclass
class Witness:
    """Per recorded step on a finite batch: the distance to each reference, and between them."""

    to_autocast: list[float] = field(default_factory=list)
    to_float32: list[float] = field(default_factory=list)
    gap: list[float] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        if not self.gap:
            return False
        steps = zip(self.to_autocast, self.to_float32, self.gap, strict=True)
        near = all(auto <= WITNESS_MATCH * gap for auto, _, gap in steps)
        far = statistics.median(self.to_float32) >= WITNESS_APART * statistics.median(self.gap)
        return near and far

    @property
    def float32_like(self) -> bool:
        """The gradients are the float32 forward's, not the low-precision one's."""
        return bool(self.gap) and statistics.median(self.to_float32) < statistics.median(
            self.to_autocast
        )


@dataclass
class ScenarioReport:
    number: int
    scenario: AmpScenario
    recording: Recording
    witness: Witness
    order_bad: int | None  # first recorded step whose gradient norm breaks the order
    skip_ok: bool
    steps: int
    expected_steps: int
    grad_error: float
    param_error: float
    finding: Finding | None = None


def analyse(number: int, problem: AmpProblem, rec: Recording, device: str) -> ScenarioReport:
    s = problem.scenario
    finite = problem.finite_batches
    witness = Witness()
    order_bad = None
    grad_error = 0.0 if rec.steps == len(finite) and rec.step_iterations == finite else math.inf
    for k, iteration in enumerate(rec.step_iterations):
        if not (0 <= iteration < s.batches and iteration != s.inf_batch):
            grad_error = math.inf  # a step on the poisoned batch: inf_step's matter, not order's
            continue
        theta, learner = rec.params[k], rec.grads[k]
        low = problem.float32_gradient(theta, iteration, AMP_DTYPE[device])
        full = problem.float32_gradient(theta, iteration, None)
        low_clipped, low_norm = clip(low, s.max_norm)
        full_clipped, _ = clip(full, s.max_norm)
        # On the CPU the autocast recomputation is the learner's computation, rounding for
        # rounding; on CUDA (cuBLAS rounds differently) the float64 gradient is the yardstick.
        reference = low_clipped if device == "cpu" else problem.clipped_gradient(theta, iteration)
        grad_error = max(grad_error, rel(learner, reference))
        witness.to_autocast.append(rel(learner, low_clipped))
        witness.to_float32.append(rel(learner, full_clipped))
        witness.gap.append(rel(low_clipped, full_clipped))
        wanted = min(s.max_norm, low_norm)
        norm = float(torch.linalg.vector_norm(learner))
        if order_bad is None and not (abs(norm - wanted) <= NORM_TOL * wanted):
            order_bad = k
    reference_final, _ = problem.reference_run()
    param_error = rel(rec.final, reference_final, scale=reference_final - problem.initial)
    if not rec.step_iterations:
        order_bad = 0
    return ScenarioReport(
        number=number,
        scenario=s,
        recording=rec,
        witness=witness,
        order_bad=order_bad,
        skip_ok=_skipped(problem, rec),
        steps=rec.steps,
        expected_steps=len(finite),
        grad_error=grad_error,
        param_error=param_error,
    )


def _skipped(problem: AmpProblem, rec: Recording) -> bool:
    """The poisoned batch left the parameters finite and as they were (a skipped step is the
    identity), and no update was recorded on it."""
    bad = problem.scenario.inf_batch
    after = rec.params_after(bad)
    if after is None or rec.snapshots.shape[0] <= bad or bad in rec.step_iterations:
        return False
    return bool(torch.isfinite(after).all()) and torch.equal(rec.snapshots[bad], after)


def _show(kinds: list[str] | tuple[str, ...]) -> str:
    return " → ".join(SHOWN[k] for k in kinds) if kinds else "—"


def diagnose(problem: AmpProblem, report: ScenarioReport, device: str) -> Finding | None:
    """The first mistake that explains what was observed, from the most basic on. Recorded
    calls and flags name the mistake; the numbers decide whether there is one."""
    s, rec = problem.scenario, report.recording
    number = report.number
    events = rec.events
    kinds = {e.kind for e in events}
    update_first = next(
        (
            i
            for i in range(s.batches)
            if "update" in (seq := rec.sequence(i))
            and "step" in seq
            and seq.index("update") < seq.index("step")
        ),
        None,
    )
    if rec.stopped in ("missing_update", "unscaled_twice") and update_first is not None:
        return _wrong_order(rec, update_first, number)
    if rec.stopped == "missing_update":
        return Finding("scale_not_updated", {"batch": rec.stopped_iteration + 1}, number)
    if rec.stopped == "grads_cleared":
        return Finding("grads_cleared_before_step", {"batch": rec.stopped_iteration + 1}, number)
    if rec.stopped == "unscaled_twice":
        return Finding("unscaled_twice", {"batch": rec.stopped_iteration + 1}, number)
    if rec.forwards and rec.autocast_forwards < rec.forwards:
        values = {"autocast": rec.autocast_forwards, "forwards": rec.forwards, "device": device}
        return Finding("autocast_not_used", values, number)
    expected_dtype = str(AMP_DTYPE[device])
    if rec.forwards and rec.autocast_dtypes != [expected_dtype]:
        used = ", ".join(d.removeprefix("torch.") for d in rec.autocast_dtypes)
        values = {"dtype": used, "expected": expected_dtype.removeprefix("torch.")}
        return Finding("autocast_wrong_dtype", values, number)
    if rec.param_dtypes != ["torch.float32"] or rec.stopped == "fp16_weights":
        shown = ", ".join(d.removeprefix("torch.") for d in rec.param_dtypes)
        return Finding("weights_not_float32", {"dtype": shown}, number)
    if report.witness.float32_like:
        # the flags said autocast, the numbers say float32: the forward that counted ran
        # outside autocast (model.forward called directly, autocast switched off in a hook...)
        dtype = expected_dtype.removeprefix("torch.")
        return Finding("forward_in_float32", {"dtype": dtype}, number)
    if not kinds & SCALER_KINDS:
        return Finding("scaler_not_used", {}, number)
    direct = [e for e in events if e.kind == "optimizer_step" and e.info["direct"]]
    if rec.stopped == "update_without_step" or (direct and "step" not in kinds):
        return Finding("optimizer_stepped_directly", {"inf_batch": s.inf_batch + 1}, number)
    unscaled_backward = next(
        (e for e in events if e.kind == "backward" and not e.info["scaled"]), None
    )
    if unscaled_backward is not None:
        return Finding("backward_not_scaled", {"batch": unscaled_backward.iteration + 1}, number)
    if direct:
        return Finding("optimizer_stepped_directly", {"inf_batch": s.inf_batch + 1}, number)
    if "update" not in kinds:
        return Finding("scale_not_updated", {"batch": s.batches}, number)
    dirty = next((e for e in events if e.kind == "backward" and e.info["dirty"]), None)
    if dirty is not None:
        return Finding("grads_never_cleared", {"batch": dirty.iteration + 1}, number)
    early = next((e for e in events if e.kind == "clip" and not e.info["unscaled"]), None)
    if early is not None:
        return Finding("clipped_before_unscale", {"batch": early.iteration + 1}, number)
    if "clip" not in kinds:
        return Finding("not_clipped", {}, number)
    if not report.skip_ok:
        return Finding("inf_step_not_skipped", {"inf_batch": s.inf_batch + 1}, number)
    out_of_order = next(
        (i for i in range(s.batches) if tuple(rec.sequence(i)) != EXPECTED_ORDER), None
    )
    if out_of_order is not None and (report.order_bad is not None or update_first is not None):
        return _wrong_order(rec, out_of_order, number)
    if report.grad_error > GRAD_TOL[device] or report.order_bad is not None:
        values = {"rel_error": report.grad_error, "max_norm": float(s.max_norm)}
        return Finding("gradients_mismatch", values, number)
    if not report.witness.passed:
        dtype = expected_dtype.removeprefix("torch.")
        return Finding("forward_in_float32", {"dtype": dtype}, number)
    if report.param_error > PARAM_TOL[device]:
        return Finding("parameters_mismatch", {"rel_error": report.param_error}, number)
    return None


def _wrong_order(rec: Recording, batch: int, number: int) -> Finding:
    values = {
        "batch": batch + 1,
        "observed": _show(rec.sequence(batch)),
        "expected": _show(EXPECTED_ORDER),
    }
    return Finding("wrong_order", values, number)


# (check id, points)
CHECKS = (
    ("autocast", 1.0),
    ("order", 2.0),
    ("inf_step", 1.0),
    ("gradients", 2.0),
    ("parameters", 1.0),
)


def _check_values(check: str, r: ScenarioReport, device: str) -> dict[str, Any]:
    base = {"scenario": r.number}
    if check == "autocast":  # the dtype this run's device autocasts to (amp_dtype)
        return {**base, "dtype": str(AMP_DTYPE[device]).removeprefix("torch.")}
    if check == "order":
        return {**base, "step": (r.order_bad or 0) + 1}
    if check == "inf_step":
        return {**base, "inf_batch": r.scenario.inf_batch + 1}
    if check == "gradients":
        return {**base, "steps": r.steps, "expected": r.expected_steps, "error": r.grad_error}
    return {**base, "error": r.param_error}


class AmpStepGrader(ExerciseGrader):
    """The autocast + GradScaler exercise: its hidden scenarios, judged as described above."""

    def warm_up(self) -> None:
        problem = AmpProblem(AmpScenario.from_dict(self.scenarios[0]))
        problem.reference_run()
        problem.float32_gradient(problem.initial, 0, torch.bfloat16)

    def judge(self, run: GradedRun, texts: Texts) -> Judgement:
        device = run.device
        reports: list[ScenarioReport] = []
        for record in run.records():
            problem = problem_of(AmpScenario.from_dict(record.spec))
            recording = Recording.read(
                record.observations, record.index, record.meta, problem.width
            )
            report = analyse(len(reports) + 1, problem, recording, device)
            report.finding = diagnose(problem, report, device)
            reports.append(report)
        passes = {
            "autocast": lambda r: r.witness.passed,
            "order": lambda r: r.order_bad is None,
            "inf_step": lambda r: r.skip_ok,
            "gradients": lambda r: r.grad_error <= GRAD_TOL[device],
            "parameters": lambda r: r.param_error <= PARAM_TOL[device],
        }
        # a script stopped before torch's own error (see the harness) did not run to its end
        checks = [runs_check(texts, all(r.recording.stopped is None for r in reports))]
        for check_id, points in CHECKS:
            bad = first(reports, lambda r, check_id=check_id: not passes[check_id](r))
            key = f"{check_id}.ok" if bad is None else f"{check_id}.bad"
            values = None if bad is None else _check_values(check_id, bad, device)
            message = texts.check(key, values)
            checks.append(make_check(check_id, passed=bad is None, points=points, message=message))
        # feedback only where a check failed: a loop whose numbers are all right has passed
        passed = all(check.passed for check in checks)
        finding = None if passed else first_finding(r.finding for r in reports)
        return Judgement(
            checks=checks,
            diagnosis=texts.diagnosis(finding) if finding is not None else None,
            details={
                "grad_errors": [r.grad_error for r in reports],
                "param_errors": [r.param_error for r in reports],
                "witness": [r.witness.__dict__ for r in reports],
            },
        )
