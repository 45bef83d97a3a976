"""Trusted grading of `gpu-memory/fit-the-budget`: one training step under a memory budget whose
update still equals the plain full-batch step.

Each hidden scenario runs as three phases, each one process in a fresh cgroup of its own
(worker/harness/exercises/fit_the_budget): `idle` (the set-up only) and `plain` (the plain
full-batch step), both trusted, and the learner's script. Here:

1. the step's gradient is compared with the full-batch gradient at the parameters the learner
   actually had, and the final parameters with the reference step's (Adam's first update is
   ~lr x sign(gradient): it hides a wrongly scaled gradient, so gradients are compared too),
   all recomputed from the scenario's seed (`MemoryProblem`);
2. the memory ratio is (learner's peak - idle peak) / (plain peak - idle peak), every peak the
   kernel's (the cgroup's `memory.max_usage_in_bytes` / `memory.peak`, read by the worker);
   on CUDA the GPU driver's (NVML) per-process figure. It must not exceed the budget;
3. for a diagnosis, the fingerprints the harness recorded tell which examples each forward
   pass carried (the chunks; recomputation by checkpointing repeats a chunk and counts once),
   and the step's gradient is tested against what each classic mistake gives over those chunks.

Numerics: float64 on the CPU agrees with the reference to ~1e-15, and the CPU tolerance, 1e-9,
sits far below what float32 anywhere in the step gives (~6e-8 for activations saved in float32:
precision cannot be traded for memory unseen). float32 (what CUDA runs, TF32 off) agrees to ~2e-6
on the gradients and ~5e-6 on the parameters (measured on this problem, float32 on the CPU). The
CUDA tolerance 1e-4 sits 20x above that and 20x below the closest mistake measured: equal
weights for `x.chunk(4)` chunks of unequal size, off by 2.4e-3 to 9e-3.
"""

import math
from dataclasses import dataclass
from typing import Any

import torch

from worker.graders.exercises.fit_the_budget.reference import MemoryProblem
from worker.graders.kit import (
    ExerciseGrader,
    Finding,
    GradedRun,
    Judgement,
    Texts,
    Unmeasured,
    as_flag,
    as_int,
    as_list,
    first,
    first_finding,
    make_check,
    memory_peak,
    per_thread,
    percent,
    rel,
    runs_check,
)
from worker.harness.exercises.fit_the_budget.problem import MemoryScenario
from worker.jobs import Phase
from worker.observations import BadObservations, Observations

problem_of = per_thread(MemoryProblem)

TOLERANCE = {"cpu": 1e-9, "cuda": 1e-4}  # relative, on gradients and on parameters
FINGERPRINT_TOL = {"cpu": 1e-9, "cuda": 1e-5}  # relative to the projections' scale
MAX_CHUNKS = 64  # beyond this many distinct chunks, no chunk-by-chunk diagnosis
MAX_LIST = 4096  # longest list accepted from the sandbox
LEFT_OUT = 1e-3  # a chunk whose weight is below this share of the last one's was zeroed away
MIN_STEP_BYTES = 1 << 20  # a plain step must cost at least this much to be a yardstick
# The trusted phases: our own scripts, run exactly as the learner's script is.
TRUSTED = {
    "idle": "",
    "plain": "optimizer.zero_grad()\nloss_fn(model(x), y).backward()\noptimizer.step()\n",
}


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
    reentrant_checkpoints: int

    @classmethod
    def read(cls, obs: Observations, index: int, meta: Any, width: int) -> "Recording":
        if not isinstance(meta, dict):
            raise BadObservations(f"scenario {index}: no record")
        grads = obs.tensor(f"s{index}.grads", dims=2, width=width)
        params = obs.tensor(f"s{index}.params", dims=2, width=width)
        final = obs.tensor(f"s{index}.final", dims=1, width=width)
        rows = obs.tensor(f"s{index}.rows", dims=1)
        steps = as_int(meta.get("steps"), "steps", minimum=0)
        sizes = as_list(meta.get("forward_sizes"), "forward sizes", longest=MAX_LIST)
        forward_sizes = [as_int(size, "forward size", minimum=0) for size in sizes]
        truncated = as_flag(meta.get("rows_truncated"), "rows_truncated")
        if grads.shape[0] != params.shape[0] or grads.shape[0] != min(steps, 1):
            raise BadObservations(f"scenario {index}: step records do not line up")
        if not truncated and sum(forward_sizes) != rows.numel():
            raise BadObservations(f"scenario {index}: fingerprints do not line up")
        return cls(
            grads=grads[0] if steps else None,
            params=params[0] if steps else None,
            final=final,
            steps=steps,
            grad_none=as_int(meta.get("grad_none"), "grad_none", minimum=0),
            rows=rows,
            forward_sizes=forward_sizes,
            rows_complete=not truncated,
            reentrant_checkpoints=as_int(
                meta.get("reentrant_checkpoints"), "reentrant checkpoints", minimum=0
            ),
        )


def memory_ratio(run: GradedRun, index: int, device: str) -> float:
    """The learner's step cost against the plain step's, both above the idle phase's peak."""
    idle = memory_peak(run.trusted("idle", index).run, device)
    plain = memory_peak(run.trusted("plain", index).run, device) - idle
    learner = memory_peak(run.learner(index).run, device) - idle
    if plain < MIN_STEP_BYTES:
        raise Unmeasured(f"the plain step of scenario {index} cost only {plain} bytes")
    return max(learner, 0) / plain


@dataclass
class ScenarioReport:
    number: int
    scenario: MemoryScenario
    steps: int
    grad_error: float
    param_error: float
    ratio: float  # the learner's step cost / the plain step's
    finding: Finding | None = None


def analyse(
    number: int, problem: MemoryProblem, rec: Recording, ratio: float, device: str
) -> ScenarioReport:
    tol = TOLERANCE[device]
    grad_error = math.inf
    if rec.grads is not None and rec.params is not None:
        grad_error = rel(rec.grads, problem.gradient(rec.params))
    after = problem.reference_after()
    param_error = rel(rec.final, after, scale=after - problem.initial)
    report = ScenarioReport(number, problem.scenario, rec.steps, grad_error, param_error, ratio)
    report.finding = diagnose(problem, report, rec, tol, device)
    return report


def diagnose(
    problem: MemoryProblem, report: ScenarioReport, rec: Recording, tol: float, device: str
) -> Finding | None:
    number = report.number
    if report.steps == 0:
        return Finding("never_stepped", scenario=number)
    if report.steps > 1:
        return Finding("stepped_every_chunk", {"steps": report.steps}, number)
    if report.grad_error <= tol:
        if report.param_error > tol:
            return Finding("parameters_mismatch", {"rel_error": report.param_error}, number)
        if report.ratio > report.scenario.budget:
            values = {"peak": percent(report.ratio), "budget": percent(report.scenario.budget)}
            return Finding("over_budget", values, number)
        return None
    if rec.grad_none:
        code = "missing_gradients" if rec.reentrant_checkpoints else "gradients_cut"
        return Finding(code, {"count": rec.grad_none}, number)
    found = _diagnose_chunks(problem, rec, tol, device, number)
    if found is not None:
        return found
    return Finding("gradients_mismatch", {"rel_error": report.grad_error}, number)


def chunks_of(problem: MemoryProblem, rec: Recording, device: str) -> list[list[int]] | None:
    """The distinct sets of examples the first layer saw, in order of first appearance (a
    chunk recomputed by checkpointing appears again and counts once); None if unknown."""
    if not rec.rows_complete:
        return None
    indices = problem.fingerprints.match(rec.rows, FINGERPRINT_TOL[device])
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
    problem: MemoryProblem, rec: Recording, tol: float, device: str, number: int
) -> Finding | None:
    """Name the mistake from the chunks the model saw and the gradient the step used."""
    assert rec.grads is not None and rec.params is not None
    chunks = chunks_of(problem, rec, device)
    if not chunks:
        return None
    covered = {i for chunk in chunks for i in chunk}
    if len(covered) < problem.examples:
        values = {"missed": problem.examples - len(covered), "examples": problem.examples}
        return Finding("batch_not_covered", values, number)
    sizes = [len(chunk) for chunk in chunks]
    if sum(sizes) != problem.examples or len(chunks) > MAX_CHUNKS:
        return None  # overlapping chunks, or too many to test one by one
    columns = torch.stack([problem.gradient(rec.params, chunk) for chunk in chunks], 1)
    k = len(chunks)
    evidence = {"smallest": min(sizes), "largest": max(sizes)}
    # Each chunk's mean loss added at full weight: the sum of k chunk means, ~k x the reference.
    if k > 1 and rel(columns.sum(1), rec.grads) <= tol:
        return Finding("loss_not_scaled", {"chunks": k}, number)
    weights = torch.linalg.lstsq(columns, rec.grads.unsqueeze(1)).solution.squeeze(1)
    explained = rel(columns @ weights, rec.grads) <= max(tol, 1e-6)
    # Only the last chunk reached the step: the gradients were cleared inside the chunk loop.
    last = float(weights[-1].abs())
    if k > 1 and explained and last > 0 and float(weights[:-1].abs().max()) < LEFT_OUT * last:
        return Finding("zeroed_every_chunk", {"chunks": k}, number)
    # One weight for every chunk although their sizes differ (e.g. loss / number of chunks).
    equal = columns.mean(1)
    if len(set(sizes)) > 1 and rel(equal * _scale(equal, rec.grads), rec.grads) <= tol:
        return Finding("chunks_misweighted", evidence, number)
    # Any other mix of chunk gradients whose weights do not follow the chunks' sizes.
    if explained:
        expected = torch.tensor(sizes, dtype=torch.float64) / problem.examples
        ratio = float(weights @ expected / (expected @ expected))
        if rel(weights, ratio * expected) > 1e-2:
            return Finding("chunks_misweighted", evidence, number)
    return None


def _scale(candidate: torch.Tensor, target: torch.Tensor) -> float:
    """The best factor to bring `candidate` onto `target` (1 when it already matches)."""
    return float(candidate @ target / max(float(candidate @ candidate), 1e-300))


_POINTS = {"one_step": 1.0, "gradients": 2.0, "parameters": 1.0, "memory": 2.0}


def _check(
    check_id: str, failing: tuple[str, dict[str, Any]] | None, ok: tuple[str, dict[str, Any]],
    texts: Texts,
) -> Any:  # fmt: skip
    key, values = ok if failing is None else failing
    return make_check(
        check_id,
        passed=failing is None,
        points=_POINTS[check_id],
        message=texts.check(key, values or None),
    )


def _checks(reports: list[ScenarioReport], texts: Texts, tol: float) -> list[Any]:
    """Named checks with partial credit; a failing check speaks of its first failing scenario."""
    checks = [runs_check(texts)]
    bad = first(reports, lambda r: r.steps != 1)
    failing = (
        None if bad is None else ("one_step.bad", {"scenario": bad.number, "steps": bad.steps})
    )
    checks.append(_check("one_step", failing, ("one_step.ok", {}), texts))
    bad = first(reports, lambda r: r.grad_error > tol)
    failing = None
    if bad is not None:
        failing = (
            ("no_step", {"scenario": bad.number})
            if bad.steps == 0
            else ("gradients.bad", {"scenario": bad.number, "error": bad.grad_error})
        )
    checks.append(_check("gradients", failing, ("gradients.ok", {}), texts))
    bad = first(reports, lambda r: r.param_error > tol)
    failing = None
    if bad is not None:
        failing = ("parameters.bad", {"scenario": bad.number, "error": bad.param_error})
    checks.append(_check("parameters", failing, ("parameters.ok", {}), texts))
    # No step, no training step to measure: an empty script must not earn the memory points.
    bad = first(reports, lambda r: r.steps == 0 or r.ratio > r.scenario.budget)
    failing = None
    if bad is not None:
        failing = (
            ("no_step", {"scenario": bad.number})
            if bad.steps == 0
            else (
                "memory.bad",
                {
                    "scenario": bad.number,
                    "peak": percent(bad.ratio),
                    "budget": percent(bad.scenario.budget),
                },
            )
        )
    tightest = max(reports, key=lambda r: r.ratio / r.scenario.budget)
    ok = (
        "memory.ok",
        {"peak": percent(tightest.ratio), "budget": percent(tightest.scenario.budget)},
    )
    checks.append(_check("memory", failing, ok, texts))
    return checks


class FitTheBudgetGrader(ExerciseGrader):
    """`gpu-memory/fit-the-budget`: its hidden scenarios, judged as described above."""

    measured_checks = frozenset({"memory"})

    def phases(self, device: str) -> tuple[Phase, ...]:
        del device
        trusted = [
            Phase(name, (index,), script=script, cacheable=True)
            for index in range(len(self.scenarios))
            for name, script in TRUSTED.items()
        ]
        learner = [Phase("learner", (index,)) for index in range(len(self.scenarios))]
        return (*trusted, *learner)

    def warm_up(self) -> None:
        MemoryProblem(MemoryScenario.from_dict(self.scenarios[0])).reference_after()

    def judge(self, run: GradedRun, texts: Texts) -> Judgement:
        device = run.device
        tol = TOLERANCE[device]
        reports = []
        for record in run.records():
            problem = problem_of(MemoryScenario.from_dict(record.spec))
            recording = Recording.read(
                record.observations, record.index, record.meta, problem.width
            )
            ratio = memory_ratio(run, record.index, device)
            reports.append(analyse(record.index + 1, problem, recording, ratio, device))
        checks = _checks(reports, texts, tol)
        finding = first_finding(r.finding for r in reports)
        return Judgement(
            checks=checks,
            diagnosis=texts.diagnosis(finding) if finding is not None else None,
            details={
                "grad_errors": [r.grad_error for r in reports],
                "param_errors": [r.param_error for r in reports],
                "peak_ratios": [r.ratio for r in reports],
                "budgets": [r.scenario.budget for r in reports],
            },
        )
