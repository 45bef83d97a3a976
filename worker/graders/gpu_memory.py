"""Trusted grading of `gpu-memory/fit-the-budget`: one training step under a memory budget whose
update still equals the plain full-batch step.

For each hidden scenario the sandbox measured the plain step (the baseline, on a copy of the model,
before the learner's code ran) and the learner's whole script the same way, and recorded the
gradients and parameters at the first `optimizer.step()`, the parameters at the end, and a
fingerprint of every row that entered the model's first layer. Here the problem is rebuilt from
its seed (`MemoryProblem`) and:

1. the step's gradient is compared with the full-batch gradient at the parameters the learner
   actually had, and the final parameters with the reference step's (Adam's first update is
   ~lr x sign(gradient): it hides a wrongly scaled gradient, so gradients are compared too);
2. the peak ratio (learner / baseline) is compared with the budget: on CUDA the allocator's peak,
   on the CPU the tracked peak of live tensor storage (see `worker.harness.gpu_memory`);
3. for a diagnosis, the fingerprints tell which examples each forward pass carried (the chunks;
   recomputation by checkpointing repeats a chunk and is counted once), and the step's gradient
   is tested against what each classic mistake gives over those chunks.

Numerics: float64 on the CPU agrees with the reference to ~1e-15; float32 (what CUDA runs, TF32
off) to ~2e-6 on the gradients and ~5e-6 on the parameters (measured on this problem, float32 on
the CPU). The CUDA tolerance 1e-4 sits 20x above that and 20x below the closest mistake measured:
equal weights for `x.chunk(4)` chunks of unequal size, off by 2.4e-3 to 9e-3.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gradlab.content.loader import Content
from gradlab.results import Check, Diagnosis
from worker.graders.base import Judgement, ScenarioGrader
from worker.graders.memory_problem import MemoryProblem
from worker.harness.memory_problem import MemoryScenario
from worker.messages import message
from worker.observations import BadObservations, Observations

TOLERANCE = {"cpu": 1e-6, "cuda": 1e-4}  # relative, on gradients and on parameters
FINGERPRINT_TOL = {"cpu": 1e-9, "cuda": 1e-5}  # relative to the projections' scale
MEASURE = {"cpu": "tracked", "cuda": "allocated"}  # which peak decides the memory check
MAX_CHUNKS = 64  # beyond this many distinct chunks, no chunk-by-chunk diagnosis
MAX_LIST = 4096  # longest list accepted from the sandbox

SCENARIOS = [
    {"seed": 401, "examples": 400, "budget": 0.7, "optimizer": "sgd", "lr": 0.05},
    # 397 is prime: no chunk count divides it.
    {"seed": 409, "examples": 397, "budget": 0.55, "optimizer": "adam", "lr": 0.01},
    {"seed": 419, "examples": 250, "budget": 0.65, "optimizer": "sgd", "lr": 0.05},
    {"seed": 421, "examples": 331, "budget": 0.6, "optimizer": "adam", "lr": 0.005},
]


def _rel(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    difference = float(torch.linalg.vector_norm(a - b))
    if not math.isfinite(difference):
        return math.inf
    denominator = float(torch.linalg.vector_norm(b if scale is None else scale))
    return difference / max(denominator, 1e-30)


def _percent(ratio: float) -> str:
    return f"{100 * ratio:.0f}"


def _int(value: Any, what: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadObservations(f"{what}: not a non-negative integer")
    return value


@dataclass
class Recording:
    """One scenario's observations, validated against the rebuilt problem."""

    grads: torch.Tensor | None  # at the first step
    params: torch.Tensor | None  # just before the first step
    final: torch.Tensor
    steps: int
    grad_none: int
    rows: torch.Tensor  # one fingerprint per row that entered the first layer
    forward_sizes: list[int]
    rows_complete: bool
    baseline_bytes: int
    peak_bytes: int

    @classmethod
    def read(cls, obs: Observations, index: int, meta: Any, width: int, device: str) -> "Recording":
        if not isinstance(meta, dict) or not isinstance(meta.get("memory"), dict):
            raise BadObservations(f"scenario {index}: no memory record")
        grads = obs.tensor(f"s{index}.grads", dims=2, width=width)
        params = obs.tensor(f"s{index}.params", dims=2, width=width)
        final = obs.tensor(f"s{index}.final", dims=1, width=width)
        rows = obs.tensor(f"s{index}.rows", dims=1)
        steps = _int(meta.get("steps"), "steps")
        grad_none = _int(meta.get("grad_none"), "grad_none")
        sizes = meta.get("forward_sizes")
        if not isinstance(sizes, list) or len(sizes) > MAX_LIST:
            raise BadObservations(f"scenario {index}: malformed forward sizes")
        forward_sizes = [_int(size, "forward size") for size in sizes]
        truncated = meta.get("rows_truncated")
        if not isinstance(truncated, bool):
            raise BadObservations(f"scenario {index}: malformed rows flag")
        if grads.shape[0] != params.shape[0] or grads.shape[0] != min(steps, 1):
            raise BadObservations(f"scenario {index}: step records do not line up")
        if not truncated and sum(forward_sizes) != rows.numel():  # type: ignore[arg-type]
            raise BadObservations(f"scenario {index}: fingerprints do not line up")
        memory = meta["memory"]
        try:
            measure = MEASURE[device]
            baseline = _int(memory["baseline"][measure], "baseline peak")
            peak = _int(memory["step"][measure], "step peak")
        except (KeyError, TypeError) as exc:
            raise BadObservations(f"scenario {index}: malformed memory record") from exc
        if not baseline:
            raise BadObservations(f"scenario {index}: the baseline step measured no memory")
        return cls(
            grads=grads[0] if steps else None,
            params=params[0] if steps else None,
            final=final,
            steps=steps,  # type: ignore[arg-type]
            grad_none=grad_none,  # type: ignore[arg-type]
            rows=rows,
            forward_sizes=forward_sizes,  # type: ignore[arg-type]
            rows_complete=not truncated,
            baseline_bytes=baseline,  # type: ignore[arg-type]
            peak_bytes=peak,  # type: ignore[arg-type]
        )


@dataclass
class ScenarioReport:
    number: int
    scenario: MemoryScenario
    steps: int
    grad_error: float
    param_error: float
    ratio: float  # the learner's peak / the baseline's
    diagnosis: tuple[str, dict[str, Any]] | None = None


def analyse(
    number: int, problem: MemoryProblem, rec: Recording, tol: float, device: str
) -> ScenarioReport:
    grad_error = math.inf
    if rec.grads is not None and rec.params is not None:
        grad_error = _rel(rec.grads, problem.gradient(rec.params))
    after = problem.reference_after()
    param_error = _rel(rec.final, after, scale=after - problem.initial)
    report = ScenarioReport(
        number,
        problem.scenario,
        rec.steps,
        grad_error,
        param_error,
        rec.peak_bytes / rec.baseline_bytes,
    )
    report.diagnosis = diagnose(problem, report, rec, tol, device)
    return report


def diagnose(
    problem: MemoryProblem, report: ScenarioReport, rec: Recording, tol: float, device: str
) -> tuple[str, dict[str, Any]] | None:
    if report.steps == 0:
        return "never_stepped", {}
    if report.steps > 1:
        return "stepped_every_chunk", {"steps": report.steps}
    if report.grad_error <= tol:
        if report.param_error > tol:
            return "parameters_mismatch", {"rel_error": f"{report.param_error:.2g}"}
        if report.ratio > report.scenario.budget:
            return "over_budget", {
                "peak": _percent(report.ratio),
                "budget": _percent(report.scenario.budget),
            }
        return None
    if rec.grad_none:
        return "missing_gradients", {"count": rec.grad_none}
    found = _diagnose_chunks(problem, rec, tol, device)
    if found is not None:
        return found
    return "gradients_mismatch", {"rel_error": f"{report.grad_error:.2g}"}


def chunks_of(problem: MemoryProblem, rec: Recording, device: str) -> list[list[int]] | None:
    """The distinct sets of examples the first layer saw, in order of first appearance (a
    chunk recomputed by checkpointing appears again and counts once); None if unknown."""
    if not rec.rows_complete:
        return None
    indices = problem.match_rows(rec.rows, FINGERPRINT_TOL[device])
    if indices is None:
        return None
    chunks: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    start = 0
    for size in rec.forward_sizes:
        chunk = indices[start : start + size]
        start += size
        key = tuple(sorted(chunk))
        if chunk and key not in seen:
            seen.add(key)
            chunks.append(chunk)
    return chunks


def _diagnose_chunks(
    problem: MemoryProblem, rec: Recording, tol: float, device: str
) -> tuple[str, dict[str, Any]] | None:
    """Name the mistake from the chunks the model saw and the gradient the step used."""
    assert rec.grads is not None and rec.params is not None
    chunks = chunks_of(problem, rec, device)
    if not chunks:
        return None
    covered = {i for chunk in chunks for i in chunk}
    if len(covered) < problem.examples:
        return "batch_not_covered", {
            "missed": problem.examples - len(covered),
            "examples": problem.examples,
        }
    sizes = [len(chunk) for chunk in chunks]
    if sum(sizes) != problem.examples or len(chunks) > MAX_CHUNKS:
        return None  # overlapping chunks, or too many to test one by one
    columns = torch.stack([problem.gradient(rec.params, chunk) for chunk in chunks], 1)
    k = len(chunks)
    evidence = {"smallest": min(sizes), "largest": max(sizes)}
    # Each chunk's mean loss added at full weight: the sum of k chunk means, ~k x the reference.
    if k > 1 and _rel(columns.sum(1), rec.grads) <= tol:
        return "loss_not_scaled", {"chunks": k}
    # One weight for every chunk although their sizes differ (e.g. loss / number of chunks).
    equal = columns.mean(1)
    if len(set(sizes)) > 1 and _rel(equal * _scale(equal, rec.grads), rec.grads) <= tol:
        return "chunks_misweighted", evidence
    # Any other mix of chunk gradients whose weights do not follow the chunks' sizes.
    weights = torch.linalg.lstsq(columns, rec.grads.unsqueeze(1)).solution.squeeze(1)
    if _rel(columns @ weights, rec.grads) <= max(tol, 1e-6):
        expected = torch.tensor(sizes, dtype=torch.float64) / problem.examples
        ratio = float(weights @ expected / (expected @ expected))
        if _rel(weights, ratio * expected) > 1e-2:
            return "chunks_misweighted", evidence
    return None


def _scale(candidate: torch.Tensor, target: torch.Tensor) -> float:
    """The best factor to bring `candidate` onto `target` (1 when it already matches)."""
    return float(candidate @ target / max(float(candidate @ candidate), 1e-300))


_POINTS = {"one_step": 1.0, "gradients": 2.0, "parameters": 1.0, "memory": 2.0}


def _check(
    check_id: str,
    failing: tuple[str, dict[str, Any]] | None,
    ok: tuple[str, dict[str, Any]],
    *,
    exercise: str,
    locale: str,
    content: Content,
) -> Check:
    key, values = ok if failing is None else failing
    text = content.exercise_message(
        exercise=exercise, locale=locale, group="checks", key=key, values=values
    )
    points = _POINTS[check_id]
    passed = failing is None
    return Check(
        id=check_id,
        passed=passed,
        points=points if passed else 0.0,
        max_points=points,
        message=text,
    )


def _first(
    reports: list[ScenarioReport], fails: Callable[[ScenarioReport], bool]
) -> ScenarioReport | None:
    return next((r for r in reports if fails(r)), None)


def _checks(
    reports: list[ScenarioReport], *, exercise: str, locale: str, content: Content, tol: float
) -> list[Check]:
    """Named checks with partial credit; a failing check speaks of its first failing scenario."""
    texts = {"exercise": exercise, "locale": locale, "content": content}
    checks = [
        Check(
            id="runs",
            passed=True,
            points=1.0,
            max_points=1.0,
            message=message(locale, "check.runs.ok"),
        )
    ]
    bad = _first(reports, lambda r: r.steps != 1)
    checks.append(
        _check(
            "one_step",
            None if bad is None else ("one_step.bad", {"scenario": bad.number, "steps": bad.steps}),
            ("one_step.ok", {}),
            **texts,
        )
    )
    bad = _first(reports, lambda r: r.grad_error > tol)
    failing: tuple[str, dict[str, Any]] | None = None
    if bad is not None:
        failing = (
            ("no_step", {"scenario": bad.number})
            if bad.steps == 0
            else ("gradients.bad", {"scenario": bad.number, "error": _fmt(bad.grad_error)})
        )
    checks.append(_check("gradients", failing, ("gradients.ok", {}), **texts))
    bad = _first(reports, lambda r: r.param_error > tol)
    failing = None
    if bad is not None:
        failing = ("parameters.bad", {"scenario": bad.number, "error": _fmt(bad.param_error)})
    checks.append(_check("parameters", failing, ("parameters.ok", {}), **texts))
    # No step, no training step to measure: an empty script must not earn the memory points.
    bad = _first(reports, lambda r: r.steps == 0 or r.ratio > r.scenario.budget)
    failing = None
    if bad is not None:
        failing = (
            ("no_step", {"scenario": bad.number})
            if bad.steps == 0
            else (
                "memory.bad",
                {
                    "scenario": bad.number,
                    "peak": _percent(bad.ratio),
                    "budget": _percent(bad.scenario.budget),
                },
            )
        )
    tightest = max(reports, key=lambda r: r.ratio / r.scenario.budget)
    ok = (
        "memory.ok",
        {"peak": _percent(tightest.ratio), "budget": _percent(tightest.scenario.budget)},
    )
    checks.append(_check("memory", failing, ok, **texts))
    return checks


def _fmt(error: float) -> str:
    return "∞" if not math.isfinite(error) else f"{error:.2g}"


MESSAGES: dict[str, frozenset[str]] = {
    **{
        f"diagnoses.{code}": frozenset(fields)
        for code, fields in {
            "over_budget": {"peak", "budget"},
            "loss_not_scaled": {"chunks"},
            "chunks_misweighted": {"smallest", "largest"},
            "batch_not_covered": {"missed", "examples"},
            "stepped_every_chunk": {"steps"},
            "never_stepped": set(),
            "missing_gradients": {"count"},
            "gradients_mismatch": {"rel_error"},
            "parameters_mismatch": {"rel_error"},
        }.items()
    },
    "checks.one_step.ok": frozenset(),
    "checks.one_step.bad": frozenset({"scenario", "steps"}),
    "checks.gradients.ok": frozenset(),
    "checks.gradients.bad": frozenset({"scenario", "error"}),
    "checks.parameters.ok": frozenset(),
    "checks.parameters.bad": frozenset({"scenario", "error"}),
    "checks.memory.ok": frozenset({"peak", "budget"}),
    "checks.memory.bad": frozenset({"scenario", "peak", "budget"}),
    "checks.no_step": frozenset({"scenario"}),
}


class FitTheBudgetGrader(ScenarioGrader):
    """`gpu-memory/fit-the-budget`: its hidden scenarios, judged as described above."""

    harness = "gpu_memory"
    messages = MESSAGES

    def judge(
        self, observations: Observations, *, exercise: str, locale: str, content: Content
    ) -> Judgement:
        device = "cuda" if observations.meta.get("device") == "cuda" else "cpu"
        tol = TOLERANCE[device]
        reports = []
        for index, (spec, meta) in enumerate(self.scenario_records(observations)):
            problem = MemoryProblem(MemoryScenario.from_dict(spec))
            recording = Recording.read(observations, index, meta, problem.width, device)
            reports.append(analyse(index + 1, problem, recording, tol, device))
        checks = _checks(reports, exercise=exercise, locale=locale, content=content, tol=tol)
        return Judgement(
            checks=checks,
            diagnosis=_diagnosis(reports, exercise=exercise, locale=locale, content=content),
            details={
                "grad_errors": [r.grad_error for r in reports],
                "param_errors": [r.param_error for r in reports],
                "peak_ratios": [r.ratio for r in reports],
                "budgets": [r.scenario.budget for r in reports],
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
    return Diagnosis(code=code, message=text, evidence={"scenario": report.number, **evidence})


GRADERS = {"gpu_memory.fit_the_budget": FitTheBudgetGrader(SCENARIOS)}
