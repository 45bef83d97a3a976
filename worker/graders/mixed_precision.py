"""Trusted grading of the mixed-precision exercise: an autocast + GradScaler training loop.

For each hidden scenario the sandbox recorded (worker/harness/mixed_precision.py): a log of the
AMP calls per loader batch, whether every forward ran under autocast (and in which dtype), the
scale after every scaler.update(), parameter snapshots at every batch, and the gradients and
parameters at every real optimizer.step(). Here the problem is rebuilt from its seed
(`AmpProblem`) and judged:

- autocast: every forward ran under autocast with `amp_dtype`;
- order: each batch made exactly scale -> backward -> unscale_ -> clip -> scaler.step -> update;
- inf step: the poisoned batch changed no parameter, ran no optimizer.step(), and the scale
  backed off;
- gradients: one real optimizer.step() per finite batch, each with the unscaled, clipped
  gradient of its batch, evaluated in float64 at the parameters the learner actually had (so one
  early mistake is not blamed on every later step);
- parameters: the final parameters against a float64 run that skips the poisoned batch.

Numerics (measured, see tests/test_grader_mixed_precision.py): a correct loop on CPU (bfloat16
autocast, 8-bit mantissa, unit roundoff 2^-8 = 3.9e-3) lands within GRAD_TOL/PARAM_TOL below with
a margin of several times, while the closest wrong loops are off by 30% or more (the smallest
structural error is an unclipped step whose norm is 1.3x max_norm) or by orders of magnitude.
On CUDA the autocast dtype is float16: a 10-bit mantissa (unit roundoff 2^-11 = 4.9e-4, 8x finer
than bfloat16), TF32 off, and a loss scale (init_scale 1024) chosen so that no finite batch's
scaled fp16 gradients overflow or underflow. The same tolerances therefore hold on CUDA with
about 8x more room; they stay far below the 30% gap to the closest mistake.
"""

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from gradlab.content.loader import Content
from gradlab.results import Check, Diagnosis
from worker.graders.amp_reference import AmpProblem
from worker.graders.base import Grader, Judgement, ScenarioGrader
from worker.harness.amp_problem import AmpScenario
from worker.messages import message
from worker.observations import BadObservations, Observations

# relative errors; see the module docstring and the measurements in the tests
GRAD_TOL = {"cpu": 0.03, "cuda": 0.03}
PARAM_TOL = {"cpu": 0.02, "cuda": 0.02}
MAX_EVENTS = 2048
EXPECTED_DTYPE = {"cpu": "torch.bfloat16", "cuda": "torch.float16"}
# what one iteration of a correct loop calls, in order, and how a learner would write each
EXPECTED_ORDER = ("scale", "backward", "unscale", "clip", "step", "update")
SHOWN = {
    "scale": "scaler.scale",
    "backward": "backward",
    "unscale": "scaler.unscale_",
    "clip": "clip_grad_norm_",
    "step": "scaler.step",
    "update": "scaler.update",
    "optimizer_step": "optimizer.step",
}
EVENT_KINDS = set(SHOWN)
SCALER_KINDS = {"scale", "unscale", "step", "update"}

# Hidden scenarios. max_norm is set per scenario so that some steps clip (by 1.3x to 2x) and
# some do not, every reference step's norm at least 5% away from the threshold (tested).
AMP_STEP = [
    {"seed": 301, "batches": 8, "batch_size": 8, "inf_batch": 3, "poison": "nan",
     "lr": 0.05, "momentum": 0.9, "max_norm": 5.5},
    {"seed": 307, "batches": 6, "batch_size": 6, "inf_batch": 0, "poison": "inf",
     "lr": 0.1, "momentum": 0.0, "max_norm": 4.75},
    {"seed": 311, "batches": 10, "batch_size": 4, "inf_batch": 9, "poison": "nan",
     "lr": 0.03, "momentum": 0.5, "max_norm": 3.5},
    {"seed": 313, "batches": 5, "batch_size": 8, "inf_batch": 2, "poison": "inf",
     "lr": 0.2, "momentum": 0.8, "max_norm": 2.25},
]  # fmt: skip


def _rel(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    difference = float(torch.linalg.vector_norm(a - b))
    if not math.isfinite(difference):
        return math.inf
    denominator = float(torch.linalg.vector_norm(b if scale is None else scale))
    return difference / max(denominator, 1e-30)


def _fmt(error: float) -> str:
    return "∞" if not math.isfinite(error) else f"{error:.2g}"


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadObservations(f"{what}: not an integer")
    return value


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise BadObservations(f"{what}: not a boolean")
    return value


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadObservations(f"{what}: not a number")
    return float(value)


@dataclass(frozen=True)
class Event:
    iteration: int
    kind: str
    info: dict[str, Any]


@dataclass
class Recording:
    """One scenario's observations, validated (types, sizes, shapes) before any use."""

    grads: torch.Tensor  # [recorded steps, width]
    params: torch.Tensor  # [recorded steps, width], just before each real optimizer.step()
    step_iterations: list[int]
    snapshots: torch.Tensor  # [batches handed out, width], at each batch hand-out
    final: torch.Tensor  # [width]
    steps: int
    yielded: int
    events: list[Event]
    events_truncated: bool
    forwards: int
    autocast_forwards: int
    autocast_dtypes: list[str]
    param_dtypes: list[str]
    stopped: str | None
    stopped_iteration: int

    @classmethod
    def read(cls, obs: Observations, index: int, meta: Any, width: int) -> "Recording":
        if not isinstance(meta, dict):
            raise BadObservations(f"scenario {index}: no record")
        grads = obs.tensor(f"s{index}.grads", dims=2, width=width)
        params = obs.tensor(f"s{index}.params", dims=2, width=width)
        snapshots = obs.tensor(f"s{index}.snapshots", dims=2, width=width)
        final = obs.tensor(f"s{index}.final", dims=1, width=width)
        step_meta, raw_events = meta.get("step_meta"), meta.get("events")
        if not isinstance(step_meta, list) or not isinstance(raw_events, list):
            raise BadObservations(f"scenario {index}: malformed records")
        if len(raw_events) > MAX_EVENTS or not len(step_meta) == grads.shape[0] == params.shape[0]:
            raise BadObservations(f"scenario {index}: records do not line up")
        iterations = []
        for item in step_meta:
            if not isinstance(item, dict):
                raise BadObservations(f"scenario {index}: malformed step record")
            iterations.append(_int(item.get("iteration"), "step iteration"))
            _flag(item.get("direct"), "step direct")
        events = [cls._event(raw) for raw in raw_events]
        dtypes = meta.get("autocast_dtypes")
        if (
            not isinstance(dtypes, list)
            or len(dtypes) > 4
            or not all(isinstance(d, str) and len(d) < 40 for d in dtypes)
        ):
            raise BadObservations(f"scenario {index}: malformed autocast dtypes")
        param_dtypes = meta.get("param_dtypes")
        if (
            not isinstance(param_dtypes, list)
            or len(param_dtypes) > 8
            or not all(isinstance(d, str) and len(d) < 40 for d in param_dtypes)
        ):
            raise BadObservations(f"scenario {index}: malformed parameter dtypes")
        stopped = meta.get("stopped")
        if stopped not in (None, "missing_update", "update_without_step", "fp16_weights"):
            raise BadObservations(f"scenario {index}: unknown stop reason")
        recording = cls(
            grads=grads,
            params=params,
            step_iterations=iterations,
            snapshots=snapshots,
            final=final,
            steps=_int(meta.get("steps"), "steps"),
            yielded=_int(meta.get("yielded"), "yielded"),
            events=events,
            events_truncated=_flag(meta.get("events_truncated"), "events_truncated"),
            forwards=_int(meta.get("forwards"), "forwards"),
            autocast_forwards=_int(meta.get("autocast_forwards"), "autocast_forwards"),
            autocast_dtypes=dtypes,
            param_dtypes=param_dtypes,
            stopped=stopped,
            stopped_iteration=_int(meta.get("stopped_iteration"), "stopped_iteration"),
        )
        if recording.steps < len(iterations) or recording.yielded < snapshots.shape[0]:
            raise BadObservations(f"scenario {index}: counts do not line up")
        return recording

    @staticmethod
    def _event(raw: Any) -> Event:
        if not isinstance(raw, dict) or raw.get("k") not in EVENT_KINDS:
            raise BadObservations("malformed event")
        kind = raw["k"]
        info: dict[str, Any] = {}
        if kind == "backward":
            info = {
                "scaled": _flag(raw.get("scaled"), "scaled"),
                "dirty": _flag(raw.get("dirty"), "dirty"),
            }
        elif kind == "optimizer_step":
            info = {"direct": _flag(raw.get("direct"), "direct")}
        elif kind == "step":
            info = {"ran": _flag(raw.get("ran"), "ran")}
        elif kind == "update":
            info = {"scale": _number(raw.get("scale"), "scale")}
        elif kind == "clip":
            info = {
                "unscaled": _flag(raw.get("unscaled"), "unscaled"),
                "max_norm": _number(raw.get("max_norm"), "max_norm"),
                "norm": _number(raw.get("norm"), "norm"),
            }
        return Event(_int(raw.get("i"), "event iteration"), kind, info)

    def params_after(self, iteration: int) -> torch.Tensor | None:
        """Parameters at the end of batch `iteration` (None if they were not recorded)."""
        if iteration + 1 < self.snapshots.shape[0]:
            return self.snapshots[iteration + 1]
        if iteration + 1 == self.yielded:
            return self.final
        return None

    def sequence(self, iteration: int) -> list[str]:
        """The AMP calls the learner made on batch `iteration`, in order. optimizer.step()
        counts only when called directly (scaler.step calls it on the learner's behalf)."""
        return [
            e.kind
            for e in self.events
            if e.iteration == iteration and (e.kind != "optimizer_step" or e.info["direct"])
        ]


@dataclass
class ScenarioReport:
    number: int
    scenario: AmpScenario
    autocast_ok: bool
    order_bad: int | None  # first batch (0-based) whose calls are out of order
    skip_problem: str | None  # None, "stepped", "params_changed", "no_backoff", "not_reached"
    steps: int
    expected_steps: int
    grad_error: float
    param_error: float
    values: dict[str, Any] = field(default_factory=dict)
    diagnosis: tuple[str, dict[str, Any]] | None = None


def _show(kinds: list[str] | tuple[str, ...]) -> str:
    return " → ".join(SHOWN[k] for k in kinds) if kinds else "—"


def analyse(
    number: int, problem: AmpProblem, rec: Recording, device: str, grad_tol: float
) -> ScenarioReport:
    s = problem.scenario
    expected_dtype = EXPECTED_DTYPE[device]
    autocast_ok = (
        rec.forwards > 0
        and rec.autocast_forwards == rec.forwards
        and rec.autocast_dtypes == [expected_dtype]
        and rec.param_dtypes == ["torch.float32"]
    )
    order_bad = None
    if rec.events_truncated or any(not 0 <= e.iteration < s.batches for e in rec.events):
        order_bad = 0
    else:
        order_bad = next(
            (i for i in range(s.batches) if tuple(rec.sequence(i)) != EXPECTED_ORDER), None
        )

    skip_problem = _skip_problem(problem, rec)

    finite = problem.finite_batches
    grad_error = 0.0 if rec.steps == len(finite) and rec.step_iterations == finite else math.inf
    for k, iteration in enumerate(rec.step_iterations):
        if 0 <= iteration < s.batches and iteration != s.inf_batch:
            reference = problem.clipped_gradient(rec.params[k], iteration)
            grad_error = max(grad_error, _rel(rec.grads[k], reference))
        else:
            grad_error = math.inf
    reference_final, _ = problem.reference_run()
    param_error = _rel(rec.final, reference_final, scale=reference_final - problem.initial)
    report = ScenarioReport(
        number=number,
        scenario=s,
        autocast_ok=autocast_ok,
        order_bad=order_bad,
        skip_problem=skip_problem,
        steps=rec.steps,
        expected_steps=len(finite),
        grad_error=grad_error,
        param_error=param_error,
    )
    report.diagnosis = diagnose(problem, report, rec, device, grad_tol)
    return report


def _skip_problem(problem: AmpProblem, rec: Recording) -> str | None:
    s = problem.scenario
    bad = s.inf_batch
    if rec.yielded <= bad or rec.snapshots.shape[0] <= bad:
        return "not_reached"
    if any(e.kind == "optimizer_step" and e.iteration == bad for e in rec.events):
        return "stepped"
    after = rec.params_after(bad)
    if after is None or not torch.equal(rec.snapshots[bad], after):
        return "params_changed"
    before_scale: float | None = s.init_scale
    for e in rec.events:
        if e.kind == "update" and e.iteration < bad:
            before_scale = e.info["scale"]
    updates = [e.info["scale"] for e in rec.events if e.kind == "update" and e.iteration == bad]
    if not updates or updates[-1] is None or before_scale is None:
        return "no_backoff"
    if not updates[-1] < before_scale:
        return "no_backoff"
    return None


def diagnose(
    problem: AmpProblem, report: ScenarioReport, rec: Recording, device: str, grad_tol: float
) -> tuple[str, dict[str, Any]] | None:
    """The first mistake that explains what was observed, from the most basic on."""
    s = problem.scenario
    events = rec.events
    kinds = {e.kind for e in events}
    if rec.stopped == "missing_update":
        return "scale_not_updated", {"batch": rec.stopped_iteration + 1}
    if rec.forwards and rec.autocast_forwards < rec.forwards:
        return "autocast_not_used", {"autocast": rec.autocast_forwards, "forwards": rec.forwards}
    if rec.forwards and rec.autocast_dtypes != [EXPECTED_DTYPE[device]]:
        used = ", ".join(d.removeprefix("torch.") for d in rec.autocast_dtypes)
        return "autocast_wrong_dtype", {
            "dtype": used,
            "expected": EXPECTED_DTYPE[device].removeprefix("torch."),
        }
    if rec.param_dtypes != ["torch.float32"]:
        shown = ", ".join(d.removeprefix("torch.") for d in rec.param_dtypes)
        return "weights_not_float32", {"dtype": shown}
    if not kinds & SCALER_KINDS:
        return "scaler_not_used", {}
    direct = [e for e in events if e.kind == "optimizer_step" and e.info["direct"]]
    if rec.stopped == "update_without_step" or (direct and "step" not in kinds):
        return "optimizer_stepped_directly", {"inf_batch": s.inf_batch + 1}
    unscaled_backward = next(
        (e for e in events if e.kind == "backward" and not e.info["scaled"]), None
    )
    if unscaled_backward is not None:
        return "backward_not_scaled", {"batch": unscaled_backward.iteration + 1}
    if direct:
        return "optimizer_stepped_directly", {"inf_batch": s.inf_batch + 1}
    if "update" not in kinds:
        return "scale_not_updated", {"batch": s.batches}
    dirty = next((e for e in events if e.kind == "backward" and e.info["dirty"]), None)
    if dirty is not None:
        return "grads_never_cleared", {"batch": dirty.iteration + 1}
    early = next((e for e in events if e.kind == "clip" and not e.info["unscaled"]), None)
    if early is not None:
        return "clipped_before_unscale", {"batch": early.iteration + 1}
    if "clip" not in kinds:
        return "not_clipped", {}
    if report.skip_problem is not None:
        return "inf_step_not_skipped", {"inf_batch": s.inf_batch + 1}
    if report.order_bad is not None:
        i = report.order_bad
        return "wrong_order", {
            "batch": i + 1,
            "observed": _show(rec.sequence(i)),
            "expected": _show(EXPECTED_ORDER),
        }
    if report.grad_error > grad_tol:
        return "gradients_mismatch", {
            "rel_error": _fmt(report.grad_error),
            "max_norm": f"{s.max_norm:g}",
        }
    return None  # parameters_mismatch is decided in judge(), which knows the tolerance


# (check id, points)
CHECKS = (
    ("autocast", 1.0),
    ("order", 2.0),
    ("inf_step", 1.0),
    ("gradients", 2.0),
    ("parameters", 1.0),
)

MESSAGES: dict[str, frozenset[str]] = {
    **{
        f"diagnoses.{code}": frozenset(fields)
        for code, fields in {
            "autocast_not_used": {"autocast", "forwards"},
            "autocast_wrong_dtype": {"dtype", "expected"},
            "weights_not_float32": {"dtype"},
            "scaler_not_used": set(),
            "backward_not_scaled": {"batch"},
            "optimizer_stepped_directly": {"inf_batch"},
            "scale_not_updated": {"batch"},
            "grads_never_cleared": {"batch"},
            "clipped_before_unscale": {"batch"},
            "not_clipped": set(),
            "wrong_order": {"batch", "observed", "expected"},
            "inf_step_not_skipped": {"inf_batch"},
            "gradients_mismatch": {"rel_error", "max_norm"},
            "parameters_mismatch": {"rel_error"},
        }.items()
    },
    **{f"checks.{key}.ok": frozenset() for key, _ in CHECKS},
    "checks.autocast.bad": frozenset({"scenario", "autocast", "forwards", "dtype"}),
    "checks.order.bad": frozenset({"scenario", "batch", "observed"}),
    "checks.inf_step.bad": frozenset({"scenario", "inf_batch"}),
    "checks.gradients.bad": frozenset({"scenario", "steps", "expected", "error"}),
    "checks.parameters.bad": frozenset({"scenario", "error"}),
}


def _check_values(check: str, r: ScenarioReport, rec: Recording) -> dict[str, Any]:
    base = {"scenario": r.number}
    if check == "autocast":
        dtypes = ", ".join(d.removeprefix("torch.") for d in rec.autocast_dtypes) or "—"
        return {
            **base,
            "autocast": rec.autocast_forwards,
            "forwards": rec.forwards,
            "dtype": dtypes,
        }
    if check == "order":
        batch = r.order_bad or 0
        return {**base, "batch": batch + 1, "observed": _show(rec.sequence(batch))}
    if check == "inf_step":
        return {**base, "inf_batch": r.scenario.inf_batch + 1}
    if check == "gradients":
        return {**base, "steps": r.steps, "expected": r.expected_steps, "error": _fmt(r.grad_error)}
    return {**base, "error": _fmt(r.param_error)}


class AmpStepGrader(ScenarioGrader):
    """The autocast + GradScaler exercise: its hidden scenarios, judged as described above."""

    harness = "mixed_precision"
    messages = MESSAGES

    def judge(
        self, observations: Observations, *, exercise: str, locale: str, content: Content
    ) -> Judgement:
        device = "cuda" if observations.meta.get("device") == "cuda" else "cpu"
        grad_tol, param_tol = GRAD_TOL[device], PARAM_TOL[device]
        reports: list[ScenarioReport] = []
        recordings: list[Recording] = []
        for index, (spec, meta) in enumerate(self.scenario_records(observations)):
            problem = AmpProblem(AmpScenario.from_dict(spec))
            recording = Recording.read(observations, index, meta, problem.width)
            report = analyse(index + 1, problem, recording, device, grad_tol)
            if report.diagnosis is None and report.param_error > param_tol:
                report.diagnosis = ("parameters_mismatch", {"rel_error": _fmt(report.param_error)})
            reports.append(report)
            recordings.append(recording)
        passes = {
            "autocast": lambda r: r.autocast_ok,
            "order": lambda r: r.order_bad is None,
            "inf_step": lambda r: r.skip_problem is None,
            "gradients": lambda r: r.grad_error <= grad_tol,
            "parameters": lambda r: r.param_error <= param_tol,
        }
        # a script stopped by ScalerMisuse (see the harness) did not run to its end
        ran = all(rec.stopped is None for rec in recordings)
        checks = [
            Check(
                id="runs",
                passed=ran,
                points=1.0 if ran else 0.0,
                max_points=1.0,
                message=message(locale, "check.runs.ok" if ran else "check.runs.bad"),
            )
        ]
        for check_id, points in CHECKS:
            bad = next((i for i, r in enumerate(reports) if not passes[check_id](r)), None)
            text = content.exercise_message(
                exercise=exercise,
                locale=locale,
                group="checks",
                key=f"{check_id}.ok" if bad is None else f"{check_id}.bad",
                values=None
                if bad is None
                else _check_values(check_id, reports[bad], recordings[bad]),
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
        diagnosis = None
        first = next((r for r in reports if r.diagnosis is not None), None)
        if first is not None and first.diagnosis is not None:
            code, evidence = first.diagnosis
            text = content.exercise_message(
                exercise=exercise, locale=locale, group="diagnoses", key=code, values=evidence
            )
            diagnosis = Diagnosis(
                code=code, message=text, evidence={"scenario": first.number, **evidence}
            )
        return Judgement(
            checks=checks,
            diagnosis=diagnosis,
            details={
                "grad_errors": [r.grad_error for r in reports],
                "param_errors": [r.param_error for r in reports],
            },
        )


GRADERS: dict[str, Grader] = {"mixed_precision.amp_step": AmpStepGrader(AMP_STEP)}
