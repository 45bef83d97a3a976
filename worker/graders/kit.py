"""What every trusted grader shares: the run it judges, its texts, checks and diagnoses, numbers,
and the validation of what comes out of the sandbox.

A grader (`ExerciseGrader`) has hidden scenarios, the phases of its job (the learner's script,
and trusted routines of its harness whose memory or time the kernel measures), and a `judge`
that turns a `GradedRun` into checks with points and at most one diagnosis.

The rule every judge keeps (docs/grading-integrity.md): a check passes or fails only on values
recomputed here from the scenario's seed, or on measurements the kernel (or the GPU driver)
took from outside the learner's process of work whose result is verified here. What the
harness recorded inside the learner's process (hooks, call orders, shapes) only chooses the
diagnosis and the evidence shown to the learner.
"""

import functools
import math
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from gradlab.content.loader import Content
from gradlab.messages import message
from gradlab.results import Check, Diagnosis, MessageGroup, MessageSource, Note
from worker.jobs import Phase, PhaseRun
from worker.observations import BadObservations, Observations

T = TypeVar("T")


@dataclass
class Judgement:
    checks: list[Check]
    diagnosis: Diagnosis | None = None
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)  # shown, never graded


class ContractError(RuntimeError):
    """A grader used a message its exercise does not declare (a bug of ours, not the learner's)."""


# --- the run being judged --------------------------------------------------------------------


@dataclass
class PhaseResult:
    run: PhaseRun
    observations: Observations

    @property
    def name(self) -> str:
        return self.run.phase.name


@dataclass
class ScenarioRecord:
    """One scenario as the learner's phase recorded it (untrusted) next to its trusted spec."""

    index: int
    spec: dict[str, Any]
    meta: Any  # the harness's per-scenario record: validate before use
    phase: PhaseResult

    @property
    def observations(self) -> Observations:
        return self.phase.observations


@dataclass
class GradedRun:
    device: str  # "cpu" | "cuda"
    scenarios: list[dict[str, Any]]
    phases: list[PhaseResult]

    def records(self) -> list[ScenarioRecord]:
        """The learner's record of every scenario, in order; BadObservations unless each
        scenario was recorded exactly once."""
        found: dict[int, ScenarioRecord] = {}
        for phase in self.phases:
            if not phase.run.phase.learner:
                continue
            metas = phase.observations.meta.get("scenarios")
            indices = phase.run.phase.scenarios
            if not isinstance(metas, list) or len(metas) != len(indices):
                raise BadObservations("one record per scenario of the phase expected")
            for index, meta in zip(indices, metas, strict=True):
                if index in found:
                    raise BadObservations(f"scenario {index} recorded twice")
                found[index] = ScenarioRecord(index, self.scenarios[index], meta, phase)
        if sorted(found) != list(range(len(self.scenarios))):
            raise BadObservations("not every scenario was recorded")
        return [found[index] for index in range(len(self.scenarios))]

    def trusted(self, name: str, index: int) -> PhaseResult:
        """The trusted phase `name` that ran scenario `index`."""
        for phase in self.phases:
            if phase.name == name and index in phase.run.phase.scenarios:
                return phase
        raise LookupError(f"no trusted phase {name} ran scenario {index}")

    def learner(self, index: int) -> PhaseResult:
        return self.trusted("learner", index)


class Unmeasured(RuntimeError):
    """A figure the verdict needs was not measured (no cgroup or no driver here): the
    platform cannot grade this exercise honestly, which is never the learner's fault."""


def measured(value: T | None, what: str) -> T:
    if value is None:
        raise Unmeasured(f"{what} was not measured (no cgroup or NVML on this worker)")
    return value


def memory_peak(phase: PhaseRun, device: str) -> int:
    """A phase's memory peak where its tensors live: the kernel's figure for the process's
    memory on the CPU, the driver's for its GPU memory on CUDA."""
    if device == "cuda":
        return measured(phase.gpu_peak_bytes, f"the GPU memory peak of phase {phase.phase.name}")
    return measured(phase.peak_bytes, f"the memory peak of phase {phase.phase.name}")


# --- the grader -------------------------------------------------------------------------------


class ExerciseGrader:
    """Hidden scenarios, the phases of a job, and the judgement. `harness` names the exercise's
    in-sandbox package (worker/harness/exercises/<harness>), which is also this grader's
    package name on the trusted side."""

    harness: str
    # Checks that rest on a measure the kernel takes (memory peaks, CPU time). The noise of a
    # busy machine only ever adds to such a measure, so a run failing on these alone is run
    # once more and judged on its own (worker/grading.py, docs/grading-integrity.md).
    measured_checks: frozenset[str] = frozenset()

    def __init__(self, scenarios: list[dict[str, Any]]) -> None:
        self.scenarios = scenarios

    def phases(self, device: str) -> tuple[Phase, ...]:
        """Just the learner's script over every scenario, unless the exercise measures more."""
        del device
        return (Phase("learner", tuple(range(len(self.scenarios)))),)

    def judge(self, run: GradedRun, texts: "Texts") -> Judgement:
        raise NotImplementedError

    def warm_up(self) -> None:
        """Compute something small once, so torch's first-use costs are paid at start."""


# --- texts ------------------------------------------------------------------------------------


class Text(str):
    """A message as written in the submission's locale, which also remembers what it was
    written from (`i18n`), so that a page in another locale can write it again."""

    i18n: MessageSource | None

    def __new__(cls, text: str, i18n: MessageSource | None = None) -> "Text":
        made = super().__new__(cls, text)
        made.i18n = i18n
        return made


def source(
    group: MessageGroup, key: str, values: dict[str, Any] | None, detail: str | None = None
) -> MessageSource:
    """A message's source for the result, its values as JSON keeps them (no inf or NaN)."""
    kept = {
        name: "∞" if isinstance(value, float) and not math.isfinite(value) else value
        for name, value in (values or {}).items()
    }
    return MessageSource(group=group, key=key, values=kept, detail=detail)


class Texts:
    """One exercise's messages in one locale. Every key and the values filling it must match
    the exercise's message contract (`messages:` in its lesson.yaml): a mismatch is our bug.
    Each message comes back as a `Text`, which `make_check` and `make_note` keep the source of."""

    def __init__(self, *, content: Content, exercise: str, locale: str) -> None:
        self.content = content
        self.exercise = exercise
        self.locale = locale
        self.contract = content.exercises[exercise].spec.messages

    def _text(self, group: MessageGroup, key: str, values: dict[str, Any] | None) -> Text:
        declared = getattr(self.contract, group).get(key)
        given = set(values or {})
        if declared is None or set(declared) != given:
            raise ContractError(
                f"{self.exercise}: {group}.{key} with {sorted(given)} is not in its contract"
            )
        text = self.content.exercise_message(
            exercise=self.exercise,
            locale=self.locale,
            group=group,  # type: ignore[arg-type]
            key=key,
            values=values,
        )
        return Text(text, source(group, key, values))

    def check(self, key: str, values: dict[str, Any] | None = None) -> Text:
        return self._text("checks", key, values)

    def diagnosis(self, finding: "Finding") -> Diagnosis:
        text = self._text("diagnoses", finding.code, finding.values)
        evidence = {"scenario": finding.scenario, **finding.values, **finding.evidence}
        return Diagnosis(code=finding.code, message=str(text), evidence=evidence, i18n=text.i18n)

    def platform(self, key: str) -> Text:
        """A message every grader shares (gradlab/messages.py)."""
        return Text(message(self.locale, key), source("platform", key, None))


@dataclass
class Finding:
    """A diagnosis found in one scenario: its code, the values its message takes, and evidence
    for clients that is not in the message (e.g. the weights chart)."""

    code: str
    values: dict[str, Any] = field(default_factory=dict)
    scenario: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def first_finding(findings: Iterable[Finding | None]) -> Finding | None:
    return next((f for f in findings if f is not None), None)


def make_check(check_id: str, *, passed: bool, points: float, message: str) -> Check:
    """A check; a `Text` message (from `Texts`) keeps its source for other locales."""
    return Check(
        id=check_id,
        passed=passed,
        points=points if passed else 0.0,
        max_points=points,
        message=str(message),
        i18n=getattr(message, "i18n", None),
    )


def make_note(note_id: str, message: str) -> Note:
    """Information shown under the checks, never graded."""
    return Note(id=note_id, message=str(message), i18n=getattr(message, "i18n", None))


def runs_check(texts: Texts, passed: bool = True) -> Check:
    key = "check.runs.ok" if passed else "check.runs.bad"
    return make_check("runs", passed=passed, points=1.0, message=texts.platform(key))


def first(items: Sequence[T], fails: Callable[[T], bool]) -> T | None:
    """The first item for which `fails` holds (a check speaks of its first failing scenario)."""
    return next((item for item in items if fails(item)), None)


def per_thread(factory: Callable[[Hashable], T]) -> Callable[[Hashable], T]:
    """Memoise `factory` per thread and argument: for a scenario's rebuilt problem, which holds a
    model the judge evaluates at the learner's parameters (mutable, so one thread at a time),
    and whose data, model and fingerprints are the same for every job of the scenario."""
    local = threading.local()

    @functools.wraps(factory)
    def cached(key: Hashable) -> T:
        store: dict[Hashable, T] = local.__dict__.setdefault("store", {})
        if key not in store:
            store[key] = factory(key)
        return store[key]

    return cached


# --- numbers ----------------------------------------------------------------------------------


def rel(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """|a - b| / |scale or b|, inf when anything is not finite."""
    difference = float(torch.linalg.vector_norm(a - b))
    if not math.isfinite(difference):
        return math.inf
    denominator = float(torch.linalg.vector_norm(b if scale is None else scale))
    return difference / max(denominator, 1e-30)


def percent(ratio: float) -> int:
    """A ratio as a whole percentage, for messages ("{peak} %")."""
    return round(100 * ratio) if math.isfinite(ratio) else 0


def mib(size: int) -> float:
    return round(size / (1 << 20), 1)


class Fingerprints:
    """Which example each recorded fingerprint is. The harness records, for every row that
    enters the model, its projection on a fixed direction (a number per row, cheap to send);
    here the same projections of the scenario's own data are sorted and searched."""

    def __init__(self, rows: torch.Tensor, direction: torch.Tensor) -> None:
        projections = rows.reshape(rows.shape[0], -1) @ direction
        self._sorted, self._order = torch.sort(projections)
        self._scale = max(float(projections.abs().max()), 1.0) if rows.numel() else 1.0
        self.count = rows.shape[0]

    def match(self, fingerprints: torch.Tensor, tol: float) -> list[int] | None:
        """The row index of each fingerprint, or None if one matches no row: the nearest
        projection, accepted within `tol` relative to the projections' scale (float32 inputs on
        CUDA move a projection by ~1e-7 of it; distinct rows sit far further apart)."""
        if fingerprints.numel() == 0:
            return []
        if not bool(torch.isfinite(fingerprints).all()) or self.count == 0:
            return None
        right = torch.searchsorted(self._sorted, fingerprints).clamp(max=self.count - 1)
        left = (right - 1).clamp(min=0)
        left_gap = (fingerprints - self._sorted[left]).abs()
        right_gap = (fingerprints - self._sorted[right]).abs()
        nearest = torch.where(left_gap <= right_gap, left, right)
        if float(torch.minimum(left_gap, right_gap).max()) > tol * self._scale:
            return None
        return [int(i) for i in self._order[nearest]]


# --- validation of what the sandbox sent ------------------------------------------------------


def as_int(value: Any, what: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadObservations(f"{what}: not an integer")
    if minimum is not None and value < minimum:
        raise BadObservations(f"{what}: below {minimum}")
    return value


def as_flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise BadObservations(f"{what}: not a boolean")
    return value


def as_number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadObservations(f"{what}: not a number")
    return float(value)


def as_list(value: Any, what: str, *, longest: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > longest:
        raise BadObservations(f"{what}: not a list of at most {longest}")
    return value


def as_vector(data: bytes, width: int, what: str) -> torch.Tensor:
    """A float64 vector of exactly `width` values from raw little-endian bytes."""
    if len(data) != 8 * width:
        raise BadObservations(f"{what}: {len(data)} bytes, expected {8 * width}")
    return torch.frombuffer(bytearray(data), dtype=torch.float64).clone()
