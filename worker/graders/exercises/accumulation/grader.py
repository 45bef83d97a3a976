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

import torch

from worker.graders.exercises.accumulation.reference import AccumulationProblem
from worker.graders.kit import (
    ExerciseGrader,
    Finding,
    GradedRun,
    Judgement,
    Texts,
    Unmeasured,
    as_int,
    as_list,
    first,
    first_finding,
    make_check,
    measured,
    mib,
    rel,
    runs_check,
)
from worker.harness.exercises.accumulation.problem import IN_FEATURES, AccumulationScenario
from worker.jobs import Phase
from worker.observations import BadObservations, Observations

TOLERANCE = {"cpu": 1e-9, "cuda": 1e-3}  # relative, on gradients and on parameters
FINGERPRINT_TOL = {"cpu": 1e-9, "cuda": 1e-5}  # relative to the projections' scale
SPREAD = 0.02  # weights within 2% of a pattern count as following it
LEAK = 1e-3  # a weight above 0.1% of the window's largest is not noise (solves are exact)
RESIDUAL = 1e-3  # least squares explains the update (else: the update is not a mix of gradients)
CHART_STEPS = 8  # diagnosis.evidence["weights"]: at most this many optimizer steps...
CHART_MICROBATCHES = 32  # ...and micro-batches, rounded to CHART_DIGITS decimals
CHART_DIGITS = 4
# The trusted references must stand apart by this much for the memory verdict to mean anything
# (the noise of a peak between runs is ~0.5 MiB; the witnesses put them 10+ MiB apart).
MIN_SEPARATION = 2 << 20
MAX_LIST = 4096
# The trusted phases: our own loops, run exactly as the learner's script is.
TRUSTED = {
    "one_at_a_time": """
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    for x, y in window:
        out = model(x)
        if "vocab_size" in globals():
            out, y = out.reshape(-1, vocab_size), y.reshape(-1)
        (loss_fn(out, y) / len(window)).backward()
    optimizer.step()
    optimizer.zero_grad()
""",
    "kept_graphs": """
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    losses = []
    for x, y in batches[start : start + accum_steps]:
        out = model(x)
        if "vocab_size" in globals():
            out, y = out.reshape(-1, vocab_size), y.reshape(-1)
        losses.append(loss_fn(out, y))
    torch.stack(losses).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
""",
    "whole_window": """
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    x = torch.cat([x for x, _ in window])
    y = torch.cat([y for _, y in window])
    out = model(x)
    if "vocab_size" in globals():
        out, y = out.reshape(-1, vocab_size), y.reshape(-1)
    loss_fn(out, y).backward()
    optimizer.step()
    optimizer.zero_grad()
""",
}


@dataclass
class Recording:
    """One scenario's observations, validated against the rebuilt problem."""

    grads: torch.Tensor  # [recorded steps, width]
    params: torch.Tensor  # [recorded steps, width], just before each update
    final: torch.Tensor  # [width]
    steps: int
    forwards_before: list[int]  # forward passes before each recorded step
    forward_batches: list[int | None]  # the micro-batch each forward carried (None: not one)
    forward_rows: list[int]  # rows (examples, or token sequences) each forward carried

    @classmethod
    def read(
        cls, obs: Observations, index: int, meta: Any, problem: AccumulationProblem, tol: float
    ) -> "Recording":
        if not isinstance(meta, dict):
            raise BadObservations(f"scenario {index}: no record")
        width = problem.width
        grads = obs.tensor(f"s{index}.grads", dims=2, width=width)
        params = obs.tensor(f"s{index}.params", dims=2, width=width)
        final = obs.tensor(f"s{index}.final", dims=1, width=width)
        fingerprints = obs.tensor(f"s{index}.fingerprints", dims=1)
        step_meta = as_list(meta.get("step_meta"), "step_meta", longest=MAX_LIST)
        forwards_before = []
        for item in step_meta:
            if not isinstance(item, dict):
                raise BadObservations(f"scenario {index}: malformed step record")
            forwards_before.append(as_int(item.get("forwards"), "forwards", minimum=0))
        rows = [
            as_int(n, "fingerprint rows", minimum=0)
            for n in as_list(meta.get("fingerprint_rows"), "fingerprint_rows", longest=MAX_LIST)
        ]
        shapes = as_list(meta.get("forward_shapes"), "forward_shapes", longest=MAX_LIST)
        steps = as_int(meta.get("steps"), "steps", minimum=0)
        if (
            not len(forwards_before) == grads.shape[0] == params.shape[0]
            or steps < len(forwards_before)
            or len(shapes) != len(rows)
            or sum(rows) != fingerprints.numel()
            or any(b > len(rows) for b in forwards_before)
        ):
            raise BadObservations(f"scenario {index}: records do not line up")
        forward_batches: list[int | None] = []
        offset, hint = 0, 0
        for count in rows:
            batch = problem.microbatch_of(fingerprints[offset : offset + count], tol, hint)
            forward_batches.append(batch)
            hint = batch + 1 if batch is not None else hint
            offset += count
        row_width = problem.scenario.seq_len if problem.tokens else IN_FEATURES
        forward_rows = []
        for shape in shapes:
            sizes = [as_int(n, "shape", minimum=0) for n in as_list(shape, "shape", longest=8)]
            forward_rows.append(math.prod(sizes) // row_width)
        return cls(grads, params, final, steps, forwards_before, forward_batches, forward_rows)

    def consumed(self) -> list[int] | None:
        """How many micro-batches (0, 1, 2... in order) had gone through the model before each
        step; None when the forwards do not read as whole micro-batches taken in order."""
        counts, seen = [], -1
        for forwards in self.forwards_before:
            for batch in self.forward_batches[:forwards]:
                if batch is None or batch > seen + 1:
                    return None  # not one micro-batch (a window, a slice...), or out of order
                seen = max(seen, batch)
            counts.append(seen + 1)
        return counts

    def seen(self) -> int:
        """Distinct micro-batches that went through the model."""
        return len({b for b in self.forward_batches if b is not None})

    def window_forward(self, problem: AccumulationProblem) -> int | None:
        """The examples of the first forward that carried more than a micro-batch holds (a
        window run at once, in any shape), if the harness saw one."""
        return next((n for n in self.forward_rows if n > problem.scenario.micro_batch_size), None)

    def params_after(self, k: int) -> torch.Tensor:
        return self.params[k + 1] if k + 1 < self.grads.shape[0] else self.final


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


def _theta_of(rec: Recording, consumed: list[int], j: int) -> torch.Tensor:
    """Parameters in effect when micro-batch j was consumed: those of the first update that
    came after it (params change only at updates)."""
    k = next((k for k, count in enumerate(consumed) if count > j), len(consumed) - 1)
    return rec.params[k]


def _columns(problem: AccumulationProblem, rec: Recording, consumed: list[int]) -> torch.Tensor:
    return torch.stack(
        [problem.microbatch_gradient(_theta_of(rec, consumed, j), j) for j in range(consumed[-1])],
        1,
    )


def weight_chart(
    problem: AccumulationProblem, rec: Recording, consumed: list[int]
) -> dict[str, list[list[float]]] | None:
    """The weight each micro-batch's loss got in each optimizer step (least squares, as in the
    diagnosis) next to the weights of a correct loop, for the feedback chart:
    `{"steps": [[w_step1_mb1, ...], ...], "expected": [[...], ...]}`, one row per step and one
    column per micro-batch consumed (0 where a step did not use a micro-batch), bounded to
    CHART_STEPS x CHART_MICROBATCHES and rounded. None when the steps do not line up with the
    correct loop's or an update is not a mix of micro-batch gradients (nothing to draw)."""
    windows = problem.windows
    if rec.steps != len(windows) or not consumed or consumed[0] < 1:
        return None
    shown = min(len(windows), CHART_STEPS)
    width = min(max(consumed[shown - 1], windows[shown - 1][-1] + 1), CHART_MICROBATCHES)
    columns = _columns(problem, rec, consumed[:shown])
    steps, expected = [], []
    for k in range(shown):
        count = consumed[k]
        target = rec.grads[k]
        solved = torch.linalg.lstsq(columns[:, :count], target.unsqueeze(1)).solution.squeeze(1)
        if rel(columns[:, :count] @ solved, target) > RESIDUAL:
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
        expected = str(a) if len(set(expected_sizes)) == 1 else ", ".join(map(str, expected_sizes))
        return Finding(
            "step_off_by_one",
            {"observed": ", ".join(map(str, observed)), "expected": expected},
            number,
        )
    if consumed is not None:
        found = _diagnose_weights(problem, rec, consumed, tol, number)
        if found is not None:
            return found
    if report.grad_error > tol:
        return Finding("gradients_mismatch", {"rel_error": report.grad_error}, number)
    return Finding("parameters_mismatch", {"rel_error": report.param_error}, number)


def _sizes(consumed: list[int]) -> list[int]:
    return [consumed[0], *(b - a for a, b in itertools.pairwise(consumed))] if consumed else []


def _diagnose_weights(
    problem: AccumulationProblem, rec: Recording, consumed: list[int], tol: float, number: int
) -> Finding | None:
    """Solve for the weight each micro-batch got in each update and match known patterns."""
    a = problem.scenario.accum_steps
    if not consumed or consumed[-1] < 1:
        return None
    columns = _columns(problem, rec, consumed)
    for k, window in enumerate(problem.windows):
        count = consumed[k]
        target = rec.grads[k]
        if count < 1:
            return None
        weights = torch.linalg.lstsq(columns[:, :count], target.unsqueeze(1)).solution.squeeze(1)
        if rel(columns[:, :count] @ weights, target) > RESIDUAL:
            return None  # the update is not a mix of micro-batch gradients
        inside, earlier = weights[window[0] : window[-1] + 1], weights[: window[0]]
        if inside.numel() == 0:
            return None
        largest = float(inside.abs().max())
        if largest == 0.0:
            return None
        if earlier.numel() and float(earlier.abs().max()) > LEAK * largest:
            return Finding("grads_never_cleared", {"step": k + 1}, number)
        if len(window) > 1 and float(inside[:-1].abs().max()) < LEAK * largest:
            return Finding("zeroed_every_microbatch", {"accum_steps": a}, number)
        expected = problem.expected_weights(window)
        ratio = float(inside @ expected / (expected @ expected))
        if rel(inside, ratio * expected) <= SPREAD:
            if abs(ratio - 1) <= 10 * tol:
                continue  # this update is right; look at the next one
            if len(window) < a and abs(ratio - len(window) / a) <= SPREAD * ratio:
                return Finding(
                    "partial_cycle_misscaled",
                    {"leftover": len(window), "accum_steps": a},
                    number,
                )
            if a > 1 and abs(ratio - a) <= SPREAD * a:
                return Finding(
                    "loss_not_scaled", {"ratio": round(ratio, 1), "accum_steps": a}, number
                )
            return Finding(
                "wrong_loss_scale", {"ratio": float(f"{ratio:.3g}"), "accum_steps": a}, number
            )
        uniform = torch.full_like(inside, float(inside.mean()))
        if problem.tokens and rel(inside, uniform) <= SPREAD:
            return Finding("token_mean_of_means", {}, number)
        return None
    return None


@dataclass
class MemoryVerdict:
    """The learner's peak placed among the trusted phases' peaks (bytes)."""

    peak: int
    one_at_a_time: int
    kept_graphs: int
    whole_window: int

    @property
    def limit(self) -> int:
        """Halfway between one micro-batch at a time and the cheapest way of holding a window."""
        return (self.one_at_a_time + min(self.kept_graphs, self.whole_window)) // 2

    @property
    def passed(self) -> bool:
        return self.peak <= self.limit

    @property
    def held_whole_window(self) -> bool:
        return self.peak > (self.kept_graphs + self.whole_window) // 2

    def values(self) -> dict[str, Any]:
        return {"peak": mib(self.peak), "expected": mib(self.one_at_a_time)}


def memory_verdict(run: GradedRun) -> MemoryVerdict:
    peaks = {}
    for name in ("learner", *TRUSTED):
        phase = run.trusted(name, 0)
        peaks[name] = measured(phase.run.peak_bytes, f"the memory peak of phase {name}")
    verdict = MemoryVerdict(
        peaks["learner"], peaks["one_at_a_time"], peaks["kept_graphs"], peaks["whole_window"]
    )
    if min(verdict.kept_graphs, verdict.whole_window) - verdict.one_at_a_time < MIN_SEPARATION:
        raise Unmeasured(f"the memory witnesses do not stand apart on this machine: {peaks}")
    return verdict


def memory_finding(verdict: MemoryVerdict, reports: list[ScenarioReport]) -> Finding:
    """Which way the learner held a window: the peak says whole windows or kept graphs; the
    fingerprints, when they saw a window go through the model, say so too (and show its
    size)."""
    window = next(
        (
            (r.number, size)
            for r in reports
            if (size := r.recording.window_forward(r.problem)) is not None
        ),
        None,
    )
    values = verdict.values()
    if window is not None:
        return Finding("microbatches_not_used", values, window[0], {"batch_size": window[1]})
    if verdict.held_whole_window:
        return Finding("microbatches_not_used", values)
    return Finding("graphs_kept_alive", values)


class AccumulationGrader(ExerciseGrader):
    """One gradient-accumulation exercise: its hidden scenarios, judged as described above."""

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
        notes: list[float] = []
        for record in run.records():
            scenario = AccumulationScenario.from_dict(record.spec)
            problem = AccumulationProblem(scenario)
            recording = Recording.read(
                record.observations, record.index, record.meta, problem, fingerprint_tol
            )
            if scenario.informational:
                if recording.steps == len(problem.windows) == recording.grads.shape[0]:
                    notes.append(_batchnorm_error(problem, recording))
                continue
            reports.append(analyse(len(reports) + 1, problem, recording, tol))
        memory = memory_verdict(run)
        checks = _checks(reports, memory, texts, tol)
        if notes and all(check.passed for check in checks):
            note = texts.check("batchnorm.note", {"error": round(100 * max(notes))})
            checks.append(make_check("batchnorm_note", passed=True, points=0.0, message=note))
        # What the learner should fix first: a loop that never steps, then a window run at
        # once, then how often the loop steps and what its updates contain, and last graphs
        # kept alive (right updates, none of the memory saved).
        finding = first_finding(r.finding for r in reports)
        held = None if memory.passed else memory_finding(memory, reports)
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
                "batchnorm_rel_error": max(notes) if notes else None,
                "memory": memory.__dict__ | {"limit": memory.limit},
            },
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
