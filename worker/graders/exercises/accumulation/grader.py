"""Trusted grading of gradient accumulation: every update against the full-batch reference, and
one micro-batch at a time proven by the memory the kernel measured.

Verdict (checks), each on trusted ground:
- `step_count`, `gradients`, `parameters`: the scenario is rebuilt from its seed
  (`AccumulationProblem`); each update's gradient is compared with its window's full-batch
  gradient at the parameters the learner actually had (so one mistake is not blamed twice), and
  the parameters after every update with a full-batch reference run;
- `microbatches`: the job's memory peak, kept by the kernel for the learner's phase (its own
  cgroup, read by the worker outside the sandbox), against the peaks of three trusted phases
  that train the same scenarios with no learner code in them: one micro-batch at a time,
  every micro-batch's graph kept alive until one backward per window, and each window as one
  batch. The memory-witness scenarios (`width` > 0) make a window's activations megabytes, so
  holding a window at once, in any shape, lands far above the first and near the others.

Feedback (diagnosis and evidence), from what the harness recorded in the learner's process:
which micro-batches each forward carried (input fingerprints), when the optimizer stepped, and,
for a diagnosis, the weight every micro-batch received in each update, solved by least squares
from each micro-batch's own gradient at the parameters in effect when it was consumed. A correct
loop gives each micro-batch of a window its share of the window's loss terms (1/accum_steps for
equal micro-batches, its valid tokens / the window's for padded tokens); every classic mistake
leaves its own pattern (x accum_steps, leaks from earlier windows, only the last micro-batch,
equal weights for unequal token counts...). None of it can pass a failing check.

Numerics: the sandbox runs float64 on the CPU (agreement ~1e-15) and float32 without TF32 on CUDA
(~3e-7 measured on an H200); the tolerances sit orders of magnitude above that and orders of
magnitude below any mistake (the smallest, a mis-scaled partial window, is off by 25%+). On the
CPU the tolerance, 1e-9, is also far below what computing in float32 instead gives (~1e-8):
precision cannot be traded for memory unseen.
"""

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from worker.graders.exercises.accumulation.memory import (
    TRUSTED,
    MemoryVerdict,
    memory_finding,
    memory_verdict,
)
from worker.graders.exercises.accumulation.recording import Recording
from worker.graders.exercises.accumulation.reference import AccumulationProblem
from worker.graders.exercises.accumulation.weights import diagnose_weights, weight_chart
from worker.graders.kit import (
    ExerciseGrader,
    Finding,
    GradedRun,
    Judgement,
    Texts,
    first,
    first_finding,
    make_check,
    make_note,
    per_thread,
    rel,
    runs_check,
)
from worker.harness.exercises.accumulation.problem import AccumulationScenario
from worker.jobs import Phase

problem_of = per_thread(AccumulationProblem)

TOLERANCE = {"cpu": 1e-9, "cuda": 1e-3}  # relative, on gradients and on parameters
FINGERPRINT_TOL = {"cpu": 1e-9, "cuda": 1e-5}  # relative to the projections' scale


@dataclass
class ScenarioReport:
    number: int
    problem: AccumulationProblem
    recording: Recording
    grad_error: float
    param_error: float
    finding: Finding | None = None
    weights: dict[str, list[list[float]]] | None = None

    @property
    def steps(self) -> int:
        return self.recording.steps

    @property
    def expected_steps(self) -> int:
        return len(self.problem.windows)


def analyse(
    number: int, problem: AccumulationProblem, rec: Recording, tol: float
) -> ScenarioReport:
    windows = problem.windows
    compared = min(rec.grads.shape[0], len(windows))
    grad_error = 0.0 if rec.steps == len(windows) else math.inf
    for k in range(compared):
        reference = problem.reference_gradient(rec.params[k], windows[k])
        grad_error = max(grad_error, rel(rec.grads[k], reference))
    reference_run = problem.reference_run()
    if rec.steps == len(windows) == rec.grads.shape[0]:
        param_error = max(
            rel(rec.params_after(k), after, scale=after - problem.initial)
            for k, after in enumerate(reference_run)
        )
    else:
        last = reference_run[-1]
        param_error = rel(rec.final, last, scale=last - problem.initial)
    report = ScenarioReport(number, problem, rec, grad_error, param_error)
    report.finding = diagnose(report, tol)
    if report.finding is not None:
        consumed = rec.consumed()
        if consumed is not None:
            report.weights = weight_chart(problem, rec, consumed)
            if report.weights is not None:
                report.finding.evidence["weights"] = report.weights
    return report


def diagnose(report: ScenarioReport, tol: float) -> Finding | None:
    """The first mistake that explains this scenario's numbers (memory is judged per job)."""
    problem, rec = report.problem, report.recording
    s = problem.scenario
    a = s.accum_steps
    number = report.number
    expected_sizes = [len(w) for w in problem.windows]
    if report.steps == 0 and rel(rec.final, problem.initial) <= tol:  # and the weights stayed
        return Finding("never_stepped", {"microbatches": rec.seen() or s.microbatches}, number)
    consumed = rec.consumed()
    if (
        a > 1
        and consumed is not None
        and len(consumed) == report.steps
        and report.steps > report.expected_steps
        and consumed == list(range(1, report.steps + 1))
    ):
        return Finding(
            "stepped_every_microbatch",
            {"steps": report.steps, "expected_steps": report.expected_steps},
            number,
        )
    full, leftover = divmod(s.microbatches, a)
    observed = _sizes(consumed) if consumed is not None else None
    if leftover and report.steps == full and observed == expected_sizes[:full]:
        return Finding("partial_cycle_dropped", {"leftover": leftover}, number)
    if report.steps != report.expected_steps:
        return Finding(
            "wrong_step_count",
            {"steps": report.steps, "expected_steps": report.expected_steps},
            number,
        )
    if report.grad_error <= tol and report.param_error <= tol:
        return None  # right updates, however the loop fetched its micro-batches
    if observed is not None and observed != expected_sizes:
        # update by update, how many micro-batches each took in: "1, 4, 4" next to "4, 4, 4"
        return Finding(
            "step_off_by_one",
            {"observed": _listed(observed), "expected": _listed(expected_sizes)},
            number,
        )
    if consumed is not None:
        found = diagnose_weights(problem, rec, consumed, tol, number)
        if found is not None:
            return found
    if report.grad_error > tol:
        return Finding("gradients_mismatch", {"rel_error": report.grad_error}, number)
    return Finding("parameters_mismatch", {"rel_error": report.param_error}, number)


def _listed(counts: list[int]) -> str:
    return ", ".join(map(str, counts))


def _sizes(consumed: list[int]) -> list[int]:
    return [consumed[0], *(b - a for a, b in itertools.pairwise(consumed))] if consumed else []


class AccumulationGrader(ExerciseGrader):
    """One gradient-accumulation exercise: its hidden scenarios, judged as described above."""

    measured_checks = frozenset({"microbatches"})

    def phases(self, device: str) -> tuple[Phase, ...]:
        del device
        every = tuple(range(len(self.scenarios)))
        trusted = tuple(
            Phase(name, every, script=script, cacheable=True) for name, script in TRUSTED.items()
        )
        return (*trusted, Phase("learner", every))

    def warm_up(self) -> None:
        problem = AccumulationProblem(AccumulationScenario.from_dict(self.scenarios[0]))
        problem.reference_run()
        problem.microbatch_gradient(problem.initial, 0)

    def judge(self, run: GradedRun, texts: Texts) -> Judgement:
        device = run.device
        tol, fingerprint_tol = TOLERANCE[device], FINGERPRINT_TOL[device]
        reports: list[ScenarioReport] = []
        batchnorm_errors: list[float] = []
        for record in run.records():
            scenario = AccumulationScenario.from_dict(record.spec)
            problem = problem_of(scenario)
            recording = Recording.read(
                record.observations, record.index, record.meta, problem, fingerprint_tol
            )
            if scenario.informational:
                if recording.steps == len(problem.windows) == recording.grads.shape[0]:
                    batchnorm_errors.append(_batchnorm_error(problem, recording))
                continue
            reports.append(analyse(len(reports) + 1, problem, recording, tol))
        memory = memory_verdict(run)
        checks = _checks(reports, memory, texts, tol)
        notes = []  # information, not a check: graded on nothing
        if batchnorm_errors and all(check.passed for check in checks):
            error = round(100 * max(batchnorm_errors))
            notes.append(
                make_note("batchnorm_note", texts.check("batchnorm.note", {"error": error}))
            )
        # What the learner should fix first: a loop that never steps, then a window run at
        # once, then how often the loop steps and what its updates contain, and last graphs
        # kept alive (right updates, none of the memory saved).
        finding = first_finding(r.finding for r in reports)
        window = next(
            (
                (r.number, size)
                for r in reports
                if (size := r.recording.window_forward(r.problem)) is not None
            ),
            None,
        )
        held = None if memory.passed else memory_finding(memory, window)
        if held is not None and (
            finding is None
            or (finding.code != "never_stepped" and held.code == "microbatches_not_used")
        ):
            finding = held
        return Judgement(
            checks=checks,
            diagnosis=texts.diagnosis(finding) if finding is not None else None,
            details={
                "grad_errors": [r.grad_error for r in reports],
                "param_errors": [r.param_error for r in reports],
                "batchnorm_rel_error": max(batchnorm_errors) if batchnorm_errors else None,
                "memory": memory.__dict__ | {"limit": memory.limit},
            },
            notes=notes,
        )


def _batchnorm_error(problem: AccumulationProblem, rec: Recording) -> float:
    """How far the learner's updates are from the full batch on a BatchNorm model."""
    return max(
        rel(rec.grads[k], problem.reference_gradient(rec.params[k], window))
        for k, window in enumerate(problem.windows)
    )


@dataclass
class _Rule:
    check: str
    points: float
    key: str
    fails: Any  # (report, tol) -> bool
    values: Any = field(default=None)  # report -> message values


_RULES = [
    _Rule(
        "step_count",
        1.0,
        "steps",
        lambda r, _tol: r.steps != r.expected_steps,
        lambda r: {"scenario": r.number, "steps": r.steps, "expected": r.expected_steps},
    ),
    _Rule(
        "gradients",
        2.0,
        "gradients",
        lambda r, tol: r.grad_error > tol,
        lambda r: {"scenario": r.number, "error": r.grad_error},
    ),
    _Rule(
        "parameters",
        1.0,
        "parameters",
        lambda r, tol: r.param_error > tol,
        lambda r: {"scenario": r.number, "error": r.param_error},
    ),
]


def _checks(
    reports: list[ScenarioReport], memory: MemoryVerdict, texts: Texts, tol: float
) -> list[Any]:
    """Named checks with partial credit; a failing check speaks of its first failing scenario."""
    checks = [runs_check(texts)]
    rules = {rule.check: rule for rule in _RULES}
    for check_id in ("step_count", "microbatches", "gradients", "parameters"):
        if check_id == "microbatches":
            key = "microbatches.ok" if memory.passed else "microbatches.bad"
            message = texts.check(key, memory.values())
            checks.append(make_check(check_id, passed=memory.passed, points=1.0, message=message))
            continue
        rule = rules[check_id]
        bad = first(reports, lambda r, rule=rule: rule.fails(r, tol))
        key = f"{rule.key}.ok" if bad is None else f"{rule.key}.bad"
        message = texts.check(key, None if bad is None else rule.values(bad))
        checks.append(make_check(check_id, passed=bad is None, points=rule.points, message=message))
    return checks
