"""`gpu-memory/fit-the-budget`: scenario design, the kernel's measure (precise enough, and blind to
what the script does in its process), fingerprints, and the judgement given measured peaks."""

import math
import re
import statistics
from pathlib import Path

import pytest
import torch

from gradlab.config import LOCALES, PROJECT_ROOT, Settings
from gradlab.content.loader import Content
from tests.inprocess import judge, observe
from worker.graders import get_grader
from worker.graders.exercises.fit_the_budget.grader import TRUSTED
from worker.graders.exercises.fit_the_budget.reference import MemoryProblem
from worker.graders.kit import Unmeasured
from worker.grading import grade
from worker.harness.exercises.fit_the_budget.problem import MemoryScenario, fingerprint_vector
from worker.pool import WarmPool

EXERCISE = "gpu-memory/fit-the-budget"
CORPUS = Path(__file__).parent / "corpus" / "fit-the-budget"
SCENARIOS = get_grader(EXERCISE).scenarios
MIB = 1 << 20


def test_scenario_design() -> None:
    """At least 3 scenarios; SGD and Adam; budgets well clear of the usual fixes (<= 0.72) and of
    the plain step (1.00); a batch size that no chunk count from 2 to 8 divides."""
    assert len(SCENARIOS) >= 3
    assert {s["optimizer"] for s in SCENARIOS} == {"sgd", "adam"}
    assert all(0.8 <= s["budget"] <= 0.9 for s in SCENARIOS)
    assert any(all(s["examples"] % k for k in range(2, 9)) for s in SCENARIOS)
    assert len({s["seed"] for s in SCENARIOS}) == len(SCENARIOS)
    assert len({s["examples"] for s in SCENARIOS}) == len(SCENARIOS)


def test_starter_code_is_the_plain_step() -> None:
    starter = (PROJECT_ROOT / "lessons/gpu-memory/exercises/fit-the-budget.py").read_text()
    assert "loss.backward()" in starter and "optimizer.step()" in starter
    assert "backward()" in TRUSTED["plain"] and TRUSTED["idle"] == ""


def test_fingerprints_identify_rows_even_in_float32() -> None:
    problem = MemoryProblem(MemoryScenario.from_dict(SCENARIOS[1]))
    rows = [5, 0, 396, 200]
    exact = problem.x[rows] @ fingerprint_vector()
    assert problem.fingerprints.match(exact, 1e-9) == rows
    rounded = problem.x[rows].float().double() @ fingerprint_vector()
    assert problem.fingerprints.match(rounded, 1e-5) == rows
    assert problem.fingerprints.match(exact + 1.0, 1e-9) is None
    nan = torch.tensor([math.nan], dtype=torch.float64)
    assert problem.fingerprints.match(nan, 1e-9) is None


# --- the judgement, given measured peaks --------------------------------------------------------


def _peaks(idle: float, plain: float, learner: float) -> dict[str, int]:
    return {"idle": round(idle * MIB), "plain": round(plain * MIB), "learner": round(learner * MIB)}


def test_the_ratio_is_the_steps_cost_above_the_idle_phase(content: Content) -> None:
    """(learner - idle) / (plain - idle): the set-up every phase holds is not the step's."""
    observed = observe(EXERCISE, (CORPUS / "reference.py").read_text())
    judgement = judge(EXERCISE, "", content, locale="es", observed=observed, peaks=_peaks(4, 20, 8))
    assert judgement.diagnosis is None and all(c.passed for c in judgement.checks)
    assert judgement.details["peak_ratios"] == [pytest.approx(0.25)] * len(SCENARIOS)
    memory = judgement.checks[-1]
    assert "25 %" in memory.message and "{" not in memory.message
    over = judge(EXERCISE, "", content, observed=observed, peaks=_peaks(4, 20, 20))
    assert over.diagnosis is not None and over.diagnosis.code == "over_budget"
    assert over.diagnosis.evidence["peak"] == 100


def test_without_a_kernel_measure_the_exercise_is_not_graded(content: Content) -> None:
    """No cgroup, no verdict: a peak nobody measured outside the process cannot decide."""
    observed = observe(EXERCISE, (CORPUS / "reference.py").read_text())
    with pytest.raises(Unmeasured):
        judge(EXERCISE, "", content, observed=observed)


def test_the_last_hint_runs_as_written(content: Content) -> None:
    """The last hint's code spans, one per line, are a script that runs in the learner's
    namespace (nothing it uses is missing, `math` included) and makes the right step, in
    every locale (the spans are the same code everywhere)."""
    lesson = content.lessons["gpu-memory"]
    scripts = {
        locale: "\n".join(re.findall(r"`([^`]+)`", text.exercises["fit-the-budget"].hints[-1]))
        for locale, text in lesson.texts.items()
    }
    assert set(scripts) == set(LOCALES)
    assert len(set(scripts.values())) == 1, scripts
    observed = observe(EXERCISE, scripts["en"])
    for _, observations in observed:
        assert observations.meta.get("error") is None, observations.meta["error"]
    judgement = judge(EXERCISE, "", content, observed=observed, peaks=_peaks(4, 20, 10))
    assert judgement.diagnosis is None and all(c.passed for c in judgement.checks)


def test_an_empty_script_earns_no_memory_points(content: Content) -> None:
    judgement = judge(EXERCISE, "pass", content, peaks=_peaks(4, 20, 4))
    memory = next(c for c in judgement.checks if c.id == "memory")
    assert not memory.passed and "no optimizer step" in memory.message
    assert judgement.diagnosis is not None and judgement.diagnosis.code == "never_stepped"


# --- the kernel's measure, in the real sandbox --------------------------------------------------


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> WarmPool:
    settings = Settings(data_dir=tmp_path_factory.mktemp("fit"), max_wall_s=30)
    warm = WarmPool(settings, slots=1)
    yield warm  # type: ignore[misc]
    warm.close()


def _ratios(pool: WarmPool, content: Content, code: str) -> list[float]:
    from worker.graders.exercises.fit_the_budget.grader import FitTheBudgetGrader

    seen: dict[str, list[float]] = {}
    original = FitTheBudgetGrader.judge

    def spy(self, run, texts):  # type: ignore[no-untyped-def]
        judgement = original(self, run, texts)
        seen["ratios"] = judgement.details["peak_ratios"]
        return judgement

    FitTheBudgetGrader.judge = spy  # type: ignore[method-assign]
    try:
        grade(content=content, settings=pool.settings, exercise=EXERCISE, code=code,
              locale="en", runner=pool.run)  # fmt: skip
    finally:
        FitTheBudgetGrader.judge = original  # type: ignore[method-assign]
    return seen["ratios"]


def test_the_kernel_reads_the_plain_step_to_a_few_percent(pool: WarmPool, content: Content) -> None:
    """The starter is the plain step: the kernel's ratio for it is 1 within 8% in every
    scenario, run after run (the memory controller charges pages in per-CPU batches)."""
    starter = (PROJECT_ROOT / "lessons/gpu-memory/exercises/fit-the-budget.py").read_text()
    for _ in range(2):
        for ratio in _ratios(pool, content, starter):
            assert ratio == pytest.approx(1.0, abs=0.08)


def test_memory_parked_outside_torch_still_counts(pool: WarmPool, content: Content) -> None:
    """Activations moved into NumPy arrays while the graph waits for backward are still memory
    of the learner's process: the kernel counts them, whatever a tensor meter would say."""
    code = """
import numpy as np

def pack(t):
    return np.array(t.detach().cpu().numpy(), copy=True)

def unpack(a):
    return torch.from_numpy(a)

optimizer.zero_grad()
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
"""
    ratios = _ratios(pool, content, code)
    assert statistics.median(ratios) > 0.9, ratios
    result = grade(content=content, settings=pool.settings, exercise=EXERCISE, code=code,
                   locale="en", runner=pool.run)  # fmt: skip
    assert result.status == "failed" and result.diagnosis.code == "over_budget"


@pytest.mark.gpu
def test_cuda_peaks_come_from_the_driver(content: Content, tmp_path: Path) -> None:
    """On CUDA the peaks are NVML's per-process figures: the plain step measures about 1 and
    micro-batches measure less (prints the ratios to calibrate the budgets there)."""
    settings = Settings(data_dir=tmp_path, device="cuda", max_wall_s=60)
    with_gpu = WarmPool(settings, slots=1, use_gpu=True)
    try:
        for name, lowest, highest in (("starter", 0.8, 1.2), ("reference", 0.0, 0.8)):
            ratios = _ratios(with_gpu, content, (CORPUS / f"{name}.py").read_text())
            print(name, ratios)
            assert all(lowest <= r <= highest for r in ratios), (name, ratios)
    finally:
        with_gpu.close()
