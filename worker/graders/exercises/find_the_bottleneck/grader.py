"""Trusted grader of `profiling/find-the-bottleneck`: the right bottleneck named, the same
training computed, and a real speedup over the planted baseline, timed from outside.

For each hidden scenario:

1. the learner's phase ran `train_step` `steps` times inside one timed block, and the planted
   baseline did the same in a trusted phase of its own (no learner code in that process). Each
   block started from fresh weights and a start step chosen by a nonce the worker sent with
   "go", and ended with "done" carrying the weights (worker/pool.py `PhaseClock`);
2. here the block's weights are recomputed from the nonce, float64 on the CPU, with the correct
   (fast) step; the learner's must match (relative to how far training moved them). Two
   tempting "fixes" that change the training are recognised by recomputing them too: dropping
   the normalisation, and normalising with each batch's own statistics;
3. the speedup of a scenario is the baseline block's CPU time / the learner block's CPU time,
   both read by the worker from the kernel's account of each phase's cgroup (the processes'
   CPU time, threads and children included: a step cannot look fast by hiding work elsewhere,
   and descheduling on a busy machine costs neither side). On CUDA, where the work is the
   GPU's, it is the ratio of the blocks' wall times. The exercise's speedup is the median over
   scenarios and must reach SPEEDUP_REQUIRED;
4. BOTTLENECK must name the planted section, `load_batch` (case, spaces, dashes and "()"
   forgiven, and the function object itself accepted).

Timing margin (2-core CPU, float64, one torch thread): the planted `load_batch` makes a step
7-17 ms; correct fixes measure 10x and more (bench/RESULTS.md), the unfixed starter ~1x. On CUDA
the baseline is launch-bound (about five tiny kernels per example) against some 30 launches for
the whole fixed step, so a fix should gain about 4-10x there (not yet measured on a GPU).

Nothing the sandbox sent is trusted: the blocks' results are recomputed, the figures that came
from the script (BOTTLENECK, profiler use) are validated and bounded, and the times come from
the kernel, not from the script's process.
"""

import math
import re
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from worker.graders.kit import (
    ExerciseGrader,
    Finding,
    GradedRun,
    Judgement,
    Texts,
    Unmeasured,
    as_flag,
    as_int,
    as_vector,
    make_check,
    make_note,
    measured,
    runs_check,
)
from worker.harness.exercises.find_the_bottleneck.problem import (
    LABELS,
    PLANTED,
    ProfilingScenario,
    flat_params,
    fresh_start,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
)
from worker.harness.exercises.find_the_bottleneck.recorder import MAX_NAME
from worker.harness.seeding import init_weights
from worker.jobs import Phase, TimedBlock
from worker.observations import BadObservations

SPEEDUP_REQUIRED = 2
TOLERANCE = {"cpu": 1e-9, "cuda": 1e-4}  # relative to the distance training moved the weights

# The training a tempting wrong "fix" does instead, by diagnosis code.
_NORMALISATIONS = {
    "dataset": lambda rows, features: (rows - features.mean(dim=0)) / features.std(dim=0),
    "normalization_dropped": lambda rows, _features: rows,
    "batch_statistics": lambda rows, _features: (rows - rows.mean(dim=0)) / rows.std(dim=0),
}


@lru_cache(maxsize=1024)
def reference_run(
    scenario: ProfilingScenario, normalisation: str, seed: int, first: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Initial and final parameters of `steps` training steps from the weights `seed` gives,
    starting at step `first`, float64 on the CPU."""
    features, targets = make_data(scenario)
    model = make_model(scenario)
    init_weights(model, seed)
    optimizer = make_optimizer(scenario, model)
    loss_fn = make_loss_fn()
    normalise = _NORMALISATIONS[normalisation]
    initial = flat_params(model)
    for step in range(first, first + scenario.steps):
        index = (step * scenario.batch_size + torch.arange(scenario.batch_size)) % len(features)
        x, y = normalise(features[index], features), targets[index]
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    return initial, flat_params(model)


def rel_to_training(
    params: torch.Tensor, scenario: ProfilingScenario, variant: str, nonce: int
) -> float:
    initial, final = reference_run(scenario, variant, *fresh_start(scenario, nonce))
    difference = float(torch.linalg.vector_norm(params - final))
    if not math.isfinite(difference):
        return math.inf
    return difference / max(float(torch.linalg.vector_norm(final - initial)), 1e-30)


def normalise_label(raw: str) -> str:
    """`Load_Batch`, `load batch`, `load-batch`, `load_batch()` all name `load_batch`."""
    label = raw.strip().strip("\"'`").strip().lower()
    label = label.removesuffix("()").strip()
    return re.sub(r"[\s\-]+", "_", label)


def _printable(raw: str) -> str:
    """A label from the sandbox, safe to show: printable characters only, bounded."""
    return "".join(c for c in raw if c.isprintable())[:MAX_NAME]


def _block(blocks: list[TimedBlock], index: int, what: str) -> TimedBlock | None:
    """The timed block a phase ran for scenario `index`; BadObservations if it ran two."""
    found = [block for block in blocks if block.tag == index]
    if len(found) > 1:
        raise BadObservations(f"{what}: scenario {index} was timed twice")
    return found[0] if found else None


def _cost(block: TimedBlock, device: str) -> float:
    """The block's cost as the worker measured it: CPU time on the CPU, wall time on CUDA."""
    if device == "cuda":
        return block.wall_ns / 1e9
    return measured(block.cpu_ns, "the CPU time of a timed block") / 1e9


@dataclass
class ScenarioReport:
    number: int
    scenario: ProfilingScenario
    missing: bool
    bottleneck_kind: str
    bottleneck: str
    profiler_starts: int
    section_share: dict[str, float]
    rel_error: float = math.inf
    variant: str | None = None  # the training the learner's weights match, if any
    speedup: float = 0.0
    learner_s: float | None = None
    baseline_s: float | None = None

    @property
    def same_results(self) -> bool:
        return not self.missing and self.variant == "dataset"


def analyse(
    number: int,
    scenario: ProfilingScenario,
    meta: Any,
    learner: TimedBlock | None,
    baseline: TimedBlock,
    section_share: dict[str, float],
    device: str,
) -> ScenarioReport:
    if not isinstance(meta, dict) or not isinstance(meta.get("bottleneck"), dict):
        raise BadObservations(f"scenario {number}: malformed record")
    named = meta["bottleneck"]
    kind, value = named.get("kind"), named.get("value")
    if kind not in {"none", "str", "function", "other"} or not isinstance(value, str):
        raise BadObservations(f"scenario {number}: malformed BOTTLENECK record")
    missing = as_flag(meta.get("missing"), "missing")
    report = ScenarioReport(
        number=number,
        scenario=scenario,
        missing=missing,
        bottleneck_kind=kind,
        bottleneck=_printable(value),
        profiler_starts=min(
            as_int(meta.get("profiler_starts"), "profiler starts", minimum=0), 10**6
        ),
        section_share=section_share,
    )
    width = reference_run(scenario, "dataset", 0, 0)[0].numel()
    expected = rel_to_training(
        as_vector(baseline.result, width, "baseline"), scenario, "dataset", baseline.nonce
    )
    if not expected <= TOLERANCE[device]:
        # trusted code computed something else: ours to fix, never the learner's fault
        raise Unmeasured(f"the planted baseline's weights are off by {expected:.3g}")
    report.baseline_s = _cost(baseline, device)
    if missing or learner is None:
        report.missing = True
        return report
    params = as_vector(learner.result, width, "learner")
    report.rel_error = rel_to_training(params, scenario, "dataset", learner.nonce)
    report.variant = next(
        (
            variant
            for variant in _NORMALISATIONS
            if rel_to_training(params, scenario, variant, learner.nonce) <= TOLERANCE[device]
        ),
        None,
    )
    report.learner_s = _cost(learner, device)
    report.speedup = report.baseline_s / max(report.learner_s, 1e-9)
    return report


def _section_share(meta: Any) -> dict[str, float]:
    """Where the planted step's time goes (a trusted phase's own timing, for feedback)."""
    shares = meta.get("section_share") if isinstance(meta, dict) else None
    if not isinstance(shares, dict):  # a trusted phase: ours to fix
        raise RuntimeError("the baseline phase sent no section shares")
    return {label: float(shares.get(label, 0.0)) for label in LABELS}


class BottleneckGrader(ExerciseGrader):
    """The profiling exercise: hidden scenarios and the judgement described above."""

    measured_checks = frozenset({"speedup"})

    def phases(self, device: str) -> tuple[Phase, ...]:
        del device
        every = tuple(range(len(self.scenarios)))
        return (
            Phase("baseline", every, timed_blocks=len(every)),
            Phase("learner", every, timed_blocks=len(every)),
        )

    def warm_up(self) -> None:
        reference_run(ProfilingScenario.from_dict(self.scenarios[0]), "dataset", 0, 0)

    def judge(self, run: GradedRun, texts: Texts) -> Judgement:
        device = run.device
        reports = []
        for record in run.records():
            scenario = ProfilingScenario.from_dict(record.spec)
            baseline_phase = run.trusted("baseline", record.index)
            baseline_meta = baseline_phase.observations.meta["scenarios"]
            position = baseline_phase.run.phase.scenarios.index(record.index)
            baseline = _block(baseline_phase.run.timed, record.index, "baseline")
            if baseline is None:
                raise Unmeasured(f"the baseline of scenario {record.index} was not timed")
            learner = _block(record.phase.run.timed, record.index, "learner")
            reports.append(
                analyse(
                    record.index + 1,
                    scenario,
                    record.meta,
                    learner,
                    baseline,
                    _section_share(baseline_meta[position]),
                    device,
                )
            )

        missing = any(r.missing for r in reports)
        wrong = next((r for r in reports if not r.same_results), None)
        speedup = statistics.median(r.speedup for r in reports)
        fast = not missing and wrong is None and speedup >= SPEEDUP_REQUIRED
        named = [_named(r) for r in reports]
        verdict = next((v for v in named if v[0] != "ok"), named[0])
        speed_values = {"speedup": round(speedup, 1), "required": SPEEDUP_REQUIRED}

        if missing:
            results_key, results_values = "results.missing", None
        elif wrong is not None:
            results_key = "results.bad"
            results_values = {"scenario": wrong.number, "error": wrong.rel_error}
        else:
            results_key, results_values = "results.ok", None
        # A speedup only counts for the same computation: dropping work is always faster.
        if results_key != "results.ok":
            speed_key, speed_msg_values = "speedup.unverified", {"required": SPEEDUP_REQUIRED}
        else:
            speed_key, speed_msg_values = ("speedup.ok" if fast else "speedup.bad"), speed_values
        bottleneck_key = {"ok": "bottleneck.ok", "none": "bottleneck.missing"}.get(
            verdict[0], "bottleneck.bad"
        )
        profiled = any(r.profiler_starts for r in reports)
        checks = [
            runs_check(texts),
            make_check(
                "bottleneck_named",
                passed=verdict[0] == "ok",
                points=1.0,
                message=texts.check(
                    bottleneck_key,
                    {"named": verdict[1]} if bottleneck_key.endswith("bad") else None,
                ),
            ),
            make_check(
                "same_results",
                passed=results_key == "results.ok",
                points=2.0,
                message=texts.check(results_key, results_values),
            ),
            make_check(
                "speedup", passed=fast, points=2.0, message=texts.check(speed_key, speed_msg_values)
            ),
        ]
        # Informational, so a note and not a check: profiling is how to find the bottleneck,
        # not what is graded (and CUPTI may be unavailable in a sandbox on CUDA).
        note = make_note(
            "profiler_used", texts.check("profiler.used" if profiled else "profiler.unused")
        )
        finding = _diagnose(reports, missing, wrong, verdict, fast, speed_values)
        return Judgement(
            checks=checks,
            notes=[note],
            diagnosis=texts.diagnosis(finding) if finding is not None else None,
            details={
                "speedups": [r.speedup for r in reports],
                "speedup": speedup,
                "rel_errors": [r.rel_error for r in reports],
                "learner_s": [r.learner_s for r in reports],
                "baseline_s": [r.baseline_s for r in reports],
                "profiler_starts": [r.profiler_starts for r in reports],
            },
        )


def _named(report: ScenarioReport) -> tuple[str, str]:
    """("ok" | "none" | "wrong" | "unknown", the name as the learner wrote it)."""
    if report.bottleneck_kind == "none" or not report.bottleneck.strip():
        return "none", ""
    if report.bottleneck_kind == "other":
        return "unknown", report.bottleneck
    label = normalise_label(report.bottleneck)
    if label == PLANTED:
        return "ok", report.bottleneck
    return ("wrong" if label in LABELS else "unknown"), report.bottleneck


def _diagnose(
    reports: list[ScenarioReport],
    missing: bool,
    wrong: ScenarioReport | None,
    verdict: tuple[str, str],
    fast: bool,
    speed_values: dict[str, Any],
) -> Finding | None:
    """The one mistake to fix first: a step that does not exist or computes something else,
    then the name, then the speed."""
    labels = ", ".join(LABELS)
    if missing:
        return Finding("train_step_missing")
    if wrong is not None:
        if wrong.variant in {"normalization_dropped", "batch_statistics"}:
            return Finding(str(wrong.variant), scenario=wrong.number)
        values = {"scenario": wrong.number, "rel_error": wrong.rel_error}
        return Finding("results_changed", values, wrong.number)
    kind, named = verdict
    if kind == "none":
        return Finding("bottleneck_not_named", {"labels": labels})
    if kind == "unknown":
        return Finding("unknown_label", {"named": named, "labels": labels})
    if kind == "wrong":
        label = normalise_label(named)
        share = statistics.median(r.section_share[label] for r in reports)
        return Finding("wrong_bottleneck", {"named": named, "share": round(100 * share)})
    if not fast:
        return Finding("not_faster", dict(speed_values))
    return None
