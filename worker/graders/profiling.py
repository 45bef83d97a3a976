"""Trusted grader of `profiling/find-the-bottleneck`: the right bottleneck named, the same
training computed, and a real speedup over the planted baseline measured in the same run.

For each hidden scenario the sandbox ran the learner's `train_step(0..steps-1)` from the initial
weights, interleaved call by call with the planted baseline step on a private copy of the model,
and reported the parameters and every call's wall time (`worker/harness/profiling.py`). Here:

1. the scenario is rebuilt from its seed, float64 on the CPU, and the correct (fast) step is run
   `steps` times; the learner's parameters must match (relative to how far training moved them).
   Two tempting "fixes" that change the training are recognised by running them too: dropping
   the normalisation, and normalising with each batch's own statistics;
2. the speedup of a scenario is median(baseline call) / median(learner call); the exercise's
   speedup is the median over scenarios, and it must reach SPEEDUP_REQUIRED. Medians make one
   descheduled call, or one disturbed scenario, irrelevant;
3. BOTTLENECK must name the planted section, `load_batch` (case, spaces, dashes and "()"
   forgiven, and the function object itself accepted).

Timing margin (2-core CPU, float64, one torch thread, a loaded machine): the planted
`load_batch` makes the baseline step 7-17 ms; the corpus' correct fixes measured 12-52x faster
(median over scenarios; the lowest, 12x, recomputes the statistics once per batch), single
scenarios 5x at worst, and a half-fix that keeps a Python loop over examples 10-20x. The
unfixed starter measures 0.9-1.1x. On CUDA the baseline is launch-bound (about five tiny kernels
per example, 32-64 examples a step) against some 30 launches for the whole fixed step, so a fix
should gain about 4-10x there (estimated: not yet measured on a GPU; `pytest -m gpu` checks it).
A threshold of 2x separates fixed from unfixed with a wide margin on both, busy machines too.

Numerics: on the CPU both sides compute in float64 with the same operations (a gathered row
normalised equals the row normalised alone, bit for bit), so a correct fix agrees to ~1e-15; on
CUDA the sandbox runs float32 without TF32, and float32 rounding through `steps` updates stays
near 1e-6 relative (2-7e-7 measured for the reference fix in float32 on the CPU, with SGD,
momentum and Adam). The tolerances sit well above that and far below what a changed
computation causes (dropping the normalisation, batch statistics, a wrong batch: 1e-2 and more).

Nothing from the sandbox is trusted: every figure is validated (types, sizes, finiteness,
bounds) and anything malformed raises BadObservations. The timings themselves can only be taken
in the learner's process, though, so a script set on cheating its own grade could distort them
(slowing the baseline through a patched torch function, say); the harness's clock is bound at
import to make the casual cases fail, and the weights, which decide `same_results`, are
recomputed here whatever the timings say.
"""

import math
import re
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from gradlab.content.loader import Content
from gradlab.results import Check, Diagnosis
from worker.graders.base import Grader, Judgement, ScenarioGrader
from worker.harness.profiling import MAX_NAME
from worker.harness.profiling_problem import (
    LABELS,
    PLANTED,
    ProfilingScenario,
    flat_params,
    make_data,
    make_loss_fn,
    make_model,
    make_optimizer,
)
from worker.messages import message
from worker.observations import BadObservations, Observations

SPEEDUP_REQUIRED = 2.0
TOLERANCE = {"cpu": 1e-6, "cuda": 1e-4}  # relative to the distance training moved the weights
MAX_SECONDS = 600.0  # no single call can take longer than a job may run
MAX_PROFILER_STARTS = 1_000_000

# Hidden scenarios: dataset and batch sizes, seeds and optimizers a script could hard-code.
# The second wraps around the end of its dataset (18 x 48 > 800), so a batch taken as a plain
# slice comes out short and is caught.
SCENARIOS = [
    {"seed": 3, "examples": 2048, "features": 24, "batch_size": 32, "steps": 8,
     "optimizer": "sgd", "lr": 0.1},
    {"seed": 5, "examples": 800, "features": 24, "batch_size": 48, "steps": 18,
     "optimizer": "momentum", "lr": 0.05},
    {"seed": 7, "examples": 1024, "features": 32, "batch_size": 64, "steps": 8,
     "optimizer": "adam", "lr": 0.01},
]  # fmt: skip

# The training a tempting wrong "fix" does instead, by diagnosis code.
_NORMALISATIONS = {
    "dataset": lambda rows, features: (rows - features.mean(dim=0)) / features.std(dim=0),
    "normalization_dropped": lambda rows, _features: rows,
    "batch_statistics": lambda rows, _features: (rows - rows.mean(dim=0)) / rows.std(dim=0),
}


@lru_cache(maxsize=32)
def reference_run(scenario: ProfilingScenario, normalisation: str) -> tuple[torch.Tensor, ...]:
    """Initial and final parameters of `steps` training steps, float64 on the CPU. It depends
    on the scenario alone, so it is computed once per process."""
    features, targets = make_data(scenario)
    model = make_model(scenario)
    optimizer = make_optimizer(scenario, model)
    loss_fn = make_loss_fn()
    normalise = _NORMALISATIONS[normalisation]
    initial = flat_params(model)
    for step in range(scenario.steps):
        first = step * scenario.batch_size
        index = (first + torch.arange(scenario.batch_size)) % len(features)
        x, y = normalise(features[index], features), targets[index]
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    return initial, flat_params(model)


def _rel_to_training(params: torch.Tensor, scenario: ProfilingScenario, variant: str) -> float:
    initial, final = reference_run(scenario, variant)
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


@dataclass
class ScenarioRecord:
    """One scenario's observations, validated."""

    missing: bool
    bottleneck_kind: str
    bottleneck: str
    profiler_starts: int
    learner_times: list[float]
    baseline_times: list[float]
    section_times: dict[str, float]
    params: torch.Tensor | None
    baseline_params: torch.Tensor | None

    @classmethod
    def read(
        cls, obs: Observations, index: int, meta: Any, scenario: ProfilingScenario, width: int
    ) -> "ScenarioRecord":
        if not isinstance(meta, dict):
            raise BadObservations(f"scenario {index}: no record")
        missing = meta.get("missing")
        named = meta.get("bottleneck")
        starts = meta.get("profiler_starts")
        if not isinstance(missing, bool) or not isinstance(named, dict):
            raise BadObservations(f"scenario {index}: malformed record")
        kind, value = named.get("kind"), named.get("value")
        if kind not in {"none", "str", "function", "other"} or not isinstance(value, str):
            raise BadObservations(f"scenario {index}: malformed BOTTLENECK record")
        if isinstance(starts, bool) or not isinstance(starts, int):
            raise BadObservations(f"scenario {index}: malformed profiler count")
        sections = meta.get("section_times")
        if not isinstance(sections, dict) or set(sections) != set(LABELS):
            raise BadObservations(f"scenario {index}: malformed section times")
        section_times = {label: _seconds(sections[label], index, zero=True) for label in LABELS}
        expected = 0 if missing else scenario.steps
        times = []
        for key in ("learner_times", "baseline_times"):
            raw = meta.get(key)
            if not isinstance(raw, list) or len(raw) != expected:
                raise BadObservations(f"scenario {index}: {key} has the wrong length")
            times.append([_seconds(t, index) for t in raw])
        params = baseline = None
        if not missing:
            params = obs.tensor(f"s{index}.params", dims=1, width=width)
            baseline = obs.tensor(f"s{index}.baseline", dims=1, width=width)
        return cls(
            missing=missing,
            bottleneck_kind=kind,
            bottleneck=_printable(value),
            profiler_starts=min(max(starts, 0), MAX_PROFILER_STARTS),
            learner_times=times[0],
            baseline_times=times[1],
            section_times=section_times,
            params=params,
            baseline_params=baseline,
        )


def _seconds(value: Any, index: int, *, zero: bool = False) -> float:
    """A wall time from the sandbox: a finite number of seconds within a job's limits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadObservations(f"scenario {index}: a time is not a number")
    seconds = float(value)
    if not (math.isfinite(seconds) and (seconds >= 0 if zero else seconds > 0)):
        raise BadObservations(f"scenario {index}: impossible time {seconds!r}")
    if seconds > MAX_SECONDS:
        raise BadObservations(f"scenario {index}: impossible time {seconds!r}")
    return seconds


@dataclass
class ScenarioReport:
    number: int
    scenario: ProfilingScenario
    record: ScenarioRecord
    rel_error: float = math.inf
    variant: str | None = None  # the wrong "fix" the learner's training matches, if any
    baseline_error: float = math.inf
    speedup: float = 0.0

    @property
    def same_results(self) -> bool:
        return not self.record.missing and self.variant == "dataset"


def analyse(
    number: int, scenario: ProfilingScenario, record: ScenarioRecord, tol: float
) -> ScenarioReport:
    """Compare one scenario's training with the references; its speedup from medians."""
    report = ScenarioReport(number, scenario, record)
    if record.missing or record.params is None or record.baseline_params is None:
        return report
    report.rel_error = _rel_to_training(record.params, scenario, "dataset")
    report.variant = next(
        (
            variant
            for variant in _NORMALISATIONS
            if _rel_to_training(record.params, scenario, variant) <= tol
        ),
        None,
    )
    # The planted step is correct, only slow: a sanity figure for the details (the learner's
    # code can reach it, so it never decides anything).
    report.baseline_error = _rel_to_training(record.baseline_params, scenario, "dataset")
    report.speedup = statistics.median(record.baseline_times) / statistics.median(
        record.learner_times
    )
    return report


MESSAGES: dict[str, frozenset[str]] = {
    "diagnoses.train_step_missing": frozenset(),
    "diagnoses.bottleneck_not_named": frozenset({"labels"}),
    "diagnoses.wrong_bottleneck": frozenset({"named", "share"}),
    "diagnoses.unknown_label": frozenset({"named", "labels"}),
    "diagnoses.not_faster": frozenset({"speedup", "required"}),
    "diagnoses.results_changed": frozenset({"scenario", "rel_error"}),
    "diagnoses.normalization_dropped": frozenset(),
    "diagnoses.batch_statistics": frozenset(),
    "checks.bottleneck.ok": frozenset(),
    "checks.bottleneck.missing": frozenset(),
    "checks.bottleneck.bad": frozenset({"named"}),
    "checks.results.ok": frozenset(),
    "checks.results.missing": frozenset(),
    "checks.results.bad": frozenset({"scenario", "error"}),
    "checks.speedup.ok": frozenset({"speedup", "required"}),
    "checks.speedup.bad": frozenset({"speedup", "required"}),
    "checks.speedup.unverified": frozenset({"required"}),
    "checks.profiler.used": frozenset(),
    "checks.profiler.unused": frozenset(),
}


class BottleneckGrader(ScenarioGrader):
    """The profiling exercise: hidden scenarios and the judgement described above."""

    harness = "profiling"
    messages = MESSAGES

    def judge(
        self, observations: Observations, *, exercise: str, locale: str, content: Content
    ) -> Judgement:
        tol = TOLERANCE["cuda" if observations.meta.get("device") == "cuda" else "cpu"]
        reports = []
        for index, (spec, meta) in enumerate(self.scenario_records(observations)):
            scenario = ProfilingScenario.from_dict(spec)
            width = reference_run(scenario, "dataset")[0].numel()
            record = ScenarioRecord.read(observations, index, meta, scenario, width)
            reports.append(analyse(index + 1, scenario, record, tol))

        def text(group: str, key: str, values: dict[str, Any] | None = None) -> str:
            return content.exercise_message(
                exercise=exercise,
                locale=locale,
                group=group,  # type: ignore[arg-type]
                key=key,
                values=values,
            )

        missing = any(r.record.missing for r in reports)
        wrong = next((r for r in reports if not r.same_results), None)
        speedup = statistics.median(r.speedup for r in reports)
        fast = not missing and wrong is None and speedup >= SPEEDUP_REQUIRED
        named = [_named(r) for r in reports]
        verdict = next((v for v in named if v[0] != "ok"), named[0])
        required_value = (
            int(SPEEDUP_REQUIRED) if float(SPEEDUP_REQUIRED).is_integer() else SPEEDUP_REQUIRED
        )
        speed_values = {"speedup": round(speedup, 1), "required": required_value}

        required = {"required": speed_values["required"]}
        if missing:
            results_key, results_values = "results.missing", None
        elif wrong is not None:
            results_key = "results.bad"
            results_values = {"scenario": wrong.number, "error": _fmt(wrong.rel_error)}
        else:
            results_key, results_values = "results.ok", None
        # A speedup only counts for the same computation: dropping work is always faster.
        if results_key != "results.ok":
            speed_key, speed_msg_values = "speedup.unverified", required
        else:
            speed_key, speed_msg_values = ("speedup.ok" if fast else "speedup.bad"), speed_values
        bottleneck_key = {"ok": "bottleneck.ok", "none": "bottleneck.missing"}.get(
            verdict[0], "bottleneck.bad"
        )
        profiled = any(r.record.profiler_starts for r in reports)
        checks = [
            Check(
                id="runs",
                passed=True,
                points=1.0,
                max_points=1.0,
                message=message(locale, "check.runs.ok"),
            ),
            _check(
                "bottleneck_named",
                1.0,
                verdict[0] == "ok",
                text(
                    "checks",
                    bottleneck_key,
                    {"named": verdict[1]} if bottleneck_key.endswith("bad") else None,
                ),
            ),
            _check(
                "same_results",
                2.0,
                results_key == "results.ok",
                text("checks", results_key, results_values),
            ),
            _check("speedup", 2.0, fast, text("checks", speed_key, speed_msg_values)),
            # Informational: profiling is how to find the bottleneck, not what is graded (and
            # CUPTI may be unavailable in a sandbox on CUDA).
            Check(
                id="profiler_used",
                passed=True,
                points=0.0,
                max_points=0.0,
                message=text("checks", "profiler.used" if profiled else "profiler.unused"),
            ),
        ]

        diagnosis = _diagnose(reports, missing, wrong, verdict, fast, speed_values)
        found = None
        if diagnosis is not None:
            code, evidence = diagnosis
            found = Diagnosis(
                code=code, message=text("diagnoses", code, evidence), evidence=evidence
            )
        return Judgement(
            checks=checks,
            diagnosis=found,
            details={
                "speedups": [r.speedup for r in reports],
                "speedup": speedup,
                "rel_errors": [r.rel_error for r in reports],
                "baseline_rel_errors": [r.baseline_error for r in reports],
                "learner_median_s": [_median(r.record.learner_times) for r in reports],
                "baseline_median_s": [_median(r.record.baseline_times) for r in reports],
                "profiler_starts": [r.record.profiler_starts for r in reports],
            },
        )


def _check(check_id: str, points: float, passed: bool, text: str) -> Check:
    return Check(
        id=check_id,
        passed=passed,
        points=points if passed else 0.0,
        max_points=points,
        message=text,
    )


def _named(report: ScenarioReport) -> tuple[str, str]:
    """("ok" | "none" | "wrong" | "unknown", the name as the learner wrote it)."""
    record = report.record
    if record.bottleneck_kind == "none" or not record.bottleneck.strip():
        return "none", ""
    if record.bottleneck_kind == "other":
        return "unknown", record.bottleneck
    label = normalise_label(record.bottleneck)
    if label == PLANTED:
        return "ok", record.bottleneck
    return ("wrong" if label in LABELS else "unknown"), record.bottleneck


def _diagnose(
    reports: list[ScenarioReport],
    missing: bool,
    wrong: ScenarioReport | None,
    verdict: tuple[str, str],
    fast: bool,
    speed_values: dict[str, float | int],
) -> tuple[str, dict[str, Any]] | None:
    """The one mistake to fix first: a step that does not exist or computes something else,
    then the name, then the speed."""
    labels = ", ".join(LABELS)
    if missing:
        return "train_step_missing", {}
    if wrong is not None:
        if wrong.variant in {"normalization_dropped", "batch_statistics"}:
            return str(wrong.variant), {}
        return "results_changed", {"scenario": wrong.number, "rel_error": _fmt(wrong.rel_error)}
    kind, named = verdict
    if kind == "none":
        return "bottleneck_not_named", {"labels": labels}
    if kind == "unknown":
        return "unknown_label", {"named": named, "labels": labels}
    if kind == "wrong":
        label = normalise_label(named)
        shares = []
        for r in reports:
            total = sum(r.record.section_times.values())
            if total > 0:
                shares.append(r.record.section_times[label] / total)
        share = f"{100 * statistics.median(shares):.0f}" if shares else "?"
        return "wrong_bottleneck", {"named": named, "share": share}
    if not fast:
        return "not_faster", dict(speed_values)
    return None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(error: float) -> str:
    return "∞" if not math.isfinite(error) else f"{error:.2g}"


GRADERS: dict[str, Grader] = {"profiling.find_the_bottleneck": BottleneckGrader(SCENARIOS)}
