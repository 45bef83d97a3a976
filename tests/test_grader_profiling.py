"""The profiling exercise (`profiling/find-the-bottleneck`): harness, trusted judgement, texts.

Most tests run the real harness in-process (`run_job` without the sandbox) and judge its real
observations, which is fast; the corpus in tests/corpus/find-the-bottleneck/ covers the full
sandboxed path, and the CUDA tests run with `pytest -m gpu`.
"""

import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from worker.graders.base import Judgement
from worker.graders.profiling import (
    GRADERS,
    MESSAGES,
    SCENARIOS,
    SPEEDUP_REQUIRED,
    TOLERANCE,
    normalise_label,
    reference_run,
)
from worker.harness.profiling_problem import (
    LABELS,
    ProfilingScenario,
    TrainingStep,
    flat_params,
    make_data,
    make_model,
    make_optimizer,
)

from gradlab.config import LOCALES, PROJECT_ROOT, Settings
from gradlab.content.loader import Content
from worker.grading import grade
from worker.harness import protocol
from worker.harness.run import run_job
from worker.observations import BadObservations, Observations, parse

EXERCISE = "profiling/find-the-bottleneck"
CORPUS = Path(__file__).parent / "corpus" / "find-the-bottleneck"
STARTER = PROJECT_ROOT / "lessons" / "profiling" / "exercises" / "find-the-bottleneck.py"
GRADER = GRADERS["profiling.find_the_bottleneck"]
# Small scenarios for in-process tests: same shapes of problem, a fraction of the time.
SMALL = [
    {"seed": 13, "examples": 512, "features": 12, "batch_size": 32, "steps": 6, "lr": 0.1},
    {"seed": 17, "examples": 200, "features": 8, "batch_size": 48, "steps": 6,
     "optimizer": "adam", "lr": 0.01},
]  # fmt: skip


def _observe(code: str, scenarios: list[dict[str, Any]], device: str = "cpu") -> Observations:
    """The harness's real observations of `code`, run in this process (no sandbox)."""
    out = io.BytesIO()
    out.close = lambda: None  # type: ignore[method-assign]  # keep the bytes readable
    spec = {"harness": "profiling", "device": device, "scenarios": scenarios}
    run_job(spec, code, out)
    return parse(out.getvalue())


def _judge(obs: Observations, content: Content, scenarios: list[dict[str, Any]]) -> Judgement:
    grader = type(GRADER)(scenarios)
    return grader.judge(obs, exercise=EXERCISE, locale="en", content=content)


def _corpus(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


def _code(judgement: Judgement) -> str | None:
    return judgement.diagnosis.code if judgement.diagnosis else None


# --- the problem itself ------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SCENARIOS, ids=lambda s: f"seed{s['seed']}")
def test_the_planted_step_and_the_fix_train_identically(spec: dict[str, Any]) -> None:
    """The premise of the exercise: the fix changes the speed, not one bit of the result."""
    scenario = ProfilingScenario.from_dict(spec)
    features, targets = make_data(scenario)
    finals = []
    for planted in (True, False):
        model = make_model(scenario)
        step = TrainingStep(
            model,
            make_optimizer(scenario, model),
            features,
            targets,
            scenario.batch_size,
            planted=planted,
        )
        for i in range(scenario.steps):
            step(i)
        finals.append(flat_params(model))
    assert torch.equal(finals[0], finals[1])
    initial, final = reference_run(scenario, "dataset")
    assert torch.allclose(final, finals[1], rtol=0, atol=1e-12)
    assert float((final - initial).norm()) > 1e-3  # training moves the weights


def test_every_scenario_is_different_and_one_wraps_around() -> None:
    scenarios = [ProfilingScenario.from_dict(s) for s in SCENARIOS]
    assert len(scenarios) >= 3
    assert len({(s.seed, s.examples, s.batch_size, s.optimizer) for s in scenarios}) == len(
        scenarios
    )
    assert len({s.optimizer for s in scenarios}) >= 3
    assert any(s.steps * s.batch_size > s.examples for s in scenarios)


def test_wrong_fixes_are_far_from_the_reference() -> None:
    """The recognised wrong "fixes" lie orders of magnitude beyond both tolerances."""
    for spec in SCENARIOS:
        scenario = ProfilingScenario.from_dict(spec)
        initial, final = reference_run(scenario, "dataset")
        for variant in ("normalization_dropped", "batch_statistics"):
            other = reference_run(scenario, variant)[1]
            rel = float((other - final).norm() / (final - initial).norm())
            assert rel > 100 * TOLERANCE["cuda"], (spec, variant, rel)


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        ("load_batch", "load_batch"),
        ("  Load_Batch ", "load_batch"),
        ("load batch", "load_batch"),
        ("load-batch", "load_batch"),
        ("load_batch()", "load_batch"),
        ('"load_batch"', "load_batch"),
        ("Forward", "forward"),
        ("data loading", "data_loading"),
    ],
)
def test_bottleneck_names_are_forgiving(raw: str, label: str) -> None:
    assert normalise_label(raw) == label


# --- harness + judgement, in-process -------------------------------------------------------------


def test_reference_passes_with_a_wide_margin(content: Content) -> None:
    judgement = _judge(_observe(_corpus("reference.py"), SMALL), content, SMALL)
    assert all(c.passed for c in judgement.checks), judgement.checks
    assert judgement.diagnosis is None
    assert judgement.details["speedup"] >= 1.5 * SPEEDUP_REQUIRED
    assert max(judgement.details["rel_errors"]) < 1e-12  # float64, same operations
    assert max(judgement.details["baseline_rel_errors"]) < 1e-12
    assert {c.id for c in judgement.checks} == {
        "runs",
        "bottleneck_named",
        "same_results",
        "speedup",
        "profiler_used",
    }
    assert sum(c.max_points for c in judgement.checks) == 6


def test_the_unfixed_starter_is_not_faster(content: Content) -> None:
    code = STARTER.read_text().replace("BOTTLENECK = None", 'BOTTLENECK = "load_batch"')
    judgement = _judge(_observe(code, SMALL), content, SMALL)
    assert _code(judgement) == "not_faster"
    assert 0.5 < judgement.details["speedup"] < SPEEDUP_REQUIRED
    speedup = next(c for c in judgement.checks if c.id == "speedup")
    assert not speedup.passed and "at least 2x" in speedup.message
    assert judgement.diagnosis is not None
    assert judgement.diagnosis.evidence["required"] == 2


def test_the_starter_as_given_asks_for_a_name(content: Content) -> None:
    judgement = _judge(_observe(STARTER.read_text(), SMALL[:1]), content, SMALL[:1])
    assert _code(judgement) == "bottleneck_not_named"
    assert judgement.diagnosis is not None and "load_batch" in judgement.diagnosis.message
    named = next(c for c in judgement.checks if c.id == "bottleneck_named")
    assert not named.passed and named.points == 0


def test_wrong_bottleneck_reports_how_little_time_that_label_takes(content: Content) -> None:
    judgement = _judge(_observe(_corpus("blamed_forward.py"), SMALL), content, SMALL)
    assert _code(judgement) == "wrong_bottleneck"
    assert judgement.diagnosis is not None
    assert judgement.diagnosis.evidence["named"] == "forward"
    assert int(judgement.diagnosis.evidence["share"]) < 30
    # the rest is right, so the other checks keep their points (partial credit)
    passed = {c.id for c in judgement.checks if c.passed}
    assert {"same_results", "speedup"} <= passed


def test_script_training_while_profiling_is_undone_before_the_check(content: Content) -> None:
    """The harness restores the initial weights and a fresh optimizer state after the script,
    so profiling (or training) a few steps at the top level does not change the verdict."""
    code = _corpus("reference.py") + "\nfor s in range(5):\n    train_step(s)\n"
    judgement = _judge(_observe(code, SMALL), content, SMALL)
    assert judgement.diagnosis is None, judgement.diagnosis


def test_profiler_use_is_seen_and_informational(content: Content) -> None:
    obs = _observe(_corpus("profiled_then_fixed.py"), SMALL[:1])
    assert obs.meta["scenarios"][0]["profiler_starts"] == 1
    judgement = _judge(obs, content, SMALL[:1])
    note = next(c for c in judgement.checks if c.id == "profiler_used")
    assert note.passed and note.max_points == 0 and "You ran torch.profiler" in note.message
    plain = _judge(_observe(_corpus("reference.py"), SMALL[:1]), content, SMALL[:1])
    note = next(c for c in plain.checks if c.id == "profiler_used")
    assert note.passed and "did not run" in note.message


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("dropped_normalization.py", "normalization_dropped"),
        ("batch_statistics.py", "batch_statistics"),
        ("renamed_step.py", "train_step_missing"),
        ("unknown_label.py", "unknown_label"),
        ("normalize_in_place.py", None),
        ("stats_per_batch.py", None),
    ],
)
def test_corpus_cases_in_process(name: str, code: str | None, content: Content) -> None:
    judgement = _judge(_observe(_corpus(name), SMALL), content, SMALL)
    assert _code(judgement) == code, judgement.diagnosis


def test_a_short_last_batch_is_a_changed_result(content: Content) -> None:
    """Slicing instead of wrapping gives a short batch where the data wraps around."""
    judgement = _judge(_observe(_corpus("sliced_no_wrap.py"), SMALL), content, SMALL)
    assert _code(judgement) == "results_changed"
    assert judgement.diagnosis is not None and judgement.diagnosis.evidence["scenario"] == 2
    speedup = next(c for c in judgement.checks if c.id == "speedup")
    assert not speedup.passed  # a speedup only counts for the same computation


def test_bottleneck_value_is_bounded_and_printable(content: Content) -> None:
    code = _corpus("reference.py").replace(
        'BOTTLENECK = "load_batch"', 'BOTTLENECK = "x\\x1b[31m" + "y" * 10000'
    )
    obs = _observe(code, SMALL[:1])
    assert len(obs.meta["scenarios"][0]["bottleneck"]["value"]) <= 64
    judgement = _judge(obs, content, SMALL[:1])
    assert _code(judgement) == "unknown_label"
    assert judgement.diagnosis is not None
    named = judgement.diagnosis.evidence["named"]
    assert "\x1b" not in named and len(named) <= 64


def test_bottleneck_of_another_type(content: Content) -> None:
    code = _corpus("reference.py").replace('BOTTLENECK = "load_batch"', "BOTTLENECK = 3")
    judgement = _judge(_observe(code, SMALL[:1]), content, SMALL[:1])
    assert _code(judgement) == "unknown_label"
    assert judgement.diagnosis is not None and judgement.diagnosis.evidence["named"] == "int"


# --- defensive parsing of observations -----------------------------------------------------------


def _tampered(obs: Observations, **changes: Any) -> Observations:
    meta = json.loads(json.dumps(obs.meta))
    meta["scenarios"][0].update(changes)
    return Observations(meta=meta, tensors=dict(obs.tensors))


@pytest.mark.parametrize(
    "changes",
    [
        {"learner_times": [0.001]},  # wrong length
        {"learner_times": [-1.0] * 6},  # impossible
        {"learner_times": [0.0] * 6},
        {"baseline_times": ["fast"] * 6},
        {"baseline_times": [1e9] * 6},
        {"baseline_times": [True] * 6},
        {"bottleneck": {"kind": "code", "value": "x"}},
        {"bottleneck": "load_batch"},
        {"missing": "no"},
        {"profiler_starts": 1.5},
        {"section_times": {"load_batch": 1.0}},
        {"section_times": dict.fromkeys(LABELS, math.nan)},
    ],
)
def test_malformed_observations_are_rejected(changes: dict[str, Any], content: Content) -> None:
    obs = _observe(_corpus("reference.py"), SMALL[:1])
    with pytest.raises(BadObservations):
        _judge(_tampered(obs, **changes), content, SMALL[:1])


def test_missing_or_misshapen_tensors_are_rejected(content: Content) -> None:
    obs = _observe(_corpus("reference.py"), SMALL[:1])
    for name, value in [("s0.params", None), ("s0.baseline", torch.zeros(3, dtype=torch.float64))]:
        tensors = dict(obs.tensors)
        if value is None:
            del tensors[name]
        else:
            tensors[name] = value
        with pytest.raises(BadObservations):
            _judge(Observations(meta=obs.meta, tensors=tensors), content, SMALL[:1])
    with pytest.raises(BadObservations):  # one record per scenario
        _judge(obs, content, SMALL)


def test_observations_are_safetensors_only() -> None:
    out = io.BytesIO()
    out.close = lambda: None  # type: ignore[method-assign]
    run_job(
        {"harness": "profiling", "device": "cpu", "scenarios": SMALL[:1]},
        _corpus("reference.py"),
        out,
    )
    assert out.getvalue().startswith(protocol.READY_MARKER)
    assert b"pickle" not in out.getvalue()[:64]


# --- texts ------------------------------------------------------------------------------------


def test_every_code_the_grader_can_give_has_a_text() -> None:
    source = (PROJECT_ROOT / "worker" / "graders" / "profiling.py").read_text()
    codes = {key.split(".", 1)[1] for key in MESSAGES if key.startswith("diagnoses.")}
    assert {
        "train_step_missing",
        "bottleneck_not_named",
        "wrong_bottleneck",
        "not_faster",
        "results_changed",
    } <= codes
    for code in codes:
        assert f'"{code}"' in source


@pytest.mark.parametrize("locale", LOCALES)
def test_exercise_text_in_every_locale(content: Content, locale: str) -> None:
    text = content.lessons["profiling"].texts[locale].exercises["find-the-bottleneck"]
    assert len(text.hints) == 3
    assert "BOTTLENECK" in text.instructions and "torch.profiler" in text.instructions
    for key in MESSAGES:
        group, name = key.split(".", 1)
        assert getattr(content.lessons["profiling"].texts[locale], group).get(name), key


def test_grader_blocks_are_the_last_keys_of_each_locale_file() -> None:
    for locale in LOCALES:
        lines = (PROJECT_ROOT / "lessons" / "profiling" / f"{locale}.yaml").read_text()
        top = [line.split(":")[0] for line in lines.splitlines() if line and line[0].isalpha()]
        assert top[-3:] == ["exercises", "diagnoses", "checks"], locale


# --- the harness in the zygote ------------------------------------------------------------------


def test_importing_the_harness_has_no_side_effects() -> None:
    """The warm pool's zygote imports it before forking: no CUDA, no threads, no output."""
    script = (
        "import sys, threading; sys.path.insert(0, 'worker');"
        "import torch, harness.profiling;"
        "assert not torch.cuda.is_initialized();"
        "assert threading.active_count() == 1;"
        "print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    assert done.stdout.strip() == "ok", done.stderr


# --- the full sandboxed path ----------------------------------------------------------------------


def test_the_profiler_works_inside_the_sandbox(content: Content, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, max_wall_s=30)
    result = grade(
        content=content,
        settings=settings,
        exercise=EXERCISE,
        code=_corpus("profiled_then_fixed.py"),
        locale="de",
    )
    assert result.status == "passed", result
    assert "load_batch" in result.output.stdout and "Self CPU" in result.output.stdout
    note = next(c for c in result.checks if c.id == "profiler_used")
    assert "torch.profiler verwendet" in note.message


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("name", "status", "code"),
    [
        ("reference.py", "passed", None),
        ("profiled_then_fixed.py", "passed", None),
        ("starter_named.py", "failed", "not_faster"),
        ("batch_statistics.py", "failed", "batch_statistics"),
    ],
)
def test_on_cuda(
    name: str, status: str, code: str | None, content: Content, tmp_path: Path
) -> None:
    """float32 on the GPU, timings bracketed by synchronize: `pytest -m gpu`."""
    settings = Settings(data_dir=tmp_path, device="cuda", max_wall_s=60)
    result = grade(
        content=content, settings=settings, exercise=EXERCISE, code=_corpus(name), locale="en"
    )
    assert result.device == "cuda"
    assert result.status == status, result
    assert (result.diagnosis.code if result.diagnosis else None) == code
