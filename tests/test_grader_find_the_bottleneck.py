"""The profiling exercise (`profiling/find-the-bottleneck`): the problem, fresh timed runs, the
judgement and its defences. Unit tests run the harness in-process (tests/inprocess.py, times
from this process's clock); the corpus in tests/corpus/find-the-bottleneck/ covers the sandboxed
path where the kernel times the runs, and the CUDA tests run with `pytest -m gpu`.
"""

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import Content
from tests.inprocess import judge, observe
from worker.graders import get_grader
from worker.graders.exercises.find_the_bottleneck.grader import (
    SPEEDUP_REQUIRED,
    TOLERANCE,
    normalise_label,
    reference_run,
)
from worker.graders.kit import Judgement
from worker.grading import grade
from worker.harness.context import Context, LocalClock
from worker.harness.exercises.find_the_bottleneck.problem import (
    FIRST_STEPS,
    MIN_START,
    ProfilingScenario,
    TrainingStep,
    flat_params,
    fresh_start,
    make_data,
    make_model,
    make_optimizer,
)
from worker.harness.exercises.find_the_bottleneck.recorder import setup
from worker.harness.seeding import init_weights
from worker.observations import BadObservations

EXERCISE = "profiling/find-the-bottleneck"
CORPUS = Path(__file__).parent / "corpus" / "find-the-bottleneck"
STARTER = PROJECT_ROOT / "lessons" / "profiling" / "exercises" / "find-the-bottleneck.py"
SCENARIOS = get_grader(EXERCISE).scenarios


def _corpus(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


def _code(judgement: Judgement) -> str | None:
    return judgement.diagnosis.code if judgement.diagnosis else None


# --- the problem itself ------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SCENARIOS, ids=lambda s: f"seed{s['seed']}")
def test_the_planted_step_and_the_fix_train_identically(spec: dict[str, Any]) -> None:
    """The premise of the exercise: the fix changes the speed, not one bit of the result, from
    any fresh start the worker may choose."""
    scenario = ProfilingScenario.from_dict(spec)
    features, targets = make_data(scenario)
    seed, first = fresh_start(scenario, 0x5EED_1234_5678)
    finals = []
    for planted in (True, False):
        model = make_model(scenario)
        init_weights(model, seed)
        step = TrainingStep(
            model, make_optimizer(scenario, model), features, targets, scenario.batch_size,
            planted=planted,
        )  # fmt: skip
        for i in range(first, first + scenario.steps):
            step(i)
        finals.append(flat_params(model))
    assert torch.equal(finals[0], finals[1])
    initial, final = reference_run(scenario, "dataset", seed, first)
    assert torch.allclose(final, finals[1], rtol=0, atol=1e-12)
    assert float((final - initial).norm()) > 1e-3  # training moves the weights


def test_fresh_starts_differ_and_always_cross_the_end_of_the_data_where_they_can() -> None:
    """The nonce picks the weights and the first step, so no result can be computed before the
    timed run; where a batch can straddle the end of the dataset, every run contains one (a
    batch taken as a plain slice comes out short there)."""
    for spec in SCENARIOS:
        s = ProfilingScenario.from_dict(spec)
        starts = {
            fresh_start(s, nonce) for nonce in range(1 << 31, (1 << 31) + 64 * (1 << 31), 1 << 31)
        }
        assert len({seed for seed, _ in starts}) == 1 or len(starts) > 8
        straddles = s.examples % s.batch_size != 0
        for nonce in (1, 7 << 40, (1 << 62) - 3, 123456789 << 31):
            _, first = fresh_start(s, nonce)
            crossing = any(
                (step * s.batch_size) % s.examples + s.batch_size > s.examples
                for step in range(first, first + s.steps)
            )
            assert crossing or not straddles, (spec, first)
    assert any(s["examples"] % s["batch_size"] for s in SCENARIOS)


def test_wrong_fixes_are_far_from_the_reference() -> None:
    """The recognised wrong "fixes" lie orders of magnitude beyond both tolerances."""
    for spec in SCENARIOS:
        scenario = ProfilingScenario.from_dict(spec)
        initial, final = reference_run(scenario, "dataset", 17, 3)
        for variant in ("normalization_dropped", "batch_statistics"):
            other = reference_run(scenario, variant, 17, 3)[1]
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


# --- judgement, harness in-process -------------------------------------------------------------


def test_reference_passes_with_a_wide_margin(content: Content) -> None:
    judgement = judge(EXERCISE, _corpus("reference.py"), content)
    assert all(c.passed for c in judgement.checks), judgement.checks
    assert judgement.diagnosis is None
    assert judgement.details["speedup"] >= 3 * SPEEDUP_REQUIRED
    assert max(judgement.details["rel_errors"]) < 1e-12  # float64, same operations
    assert {c.id for c in judgement.checks} == {
        "runs", "bottleneck_named", "same_results", "speedup",
    }  # fmt: skip
    assert sum(c.max_points for c in judgement.checks) == 6
    # whether the script profiled is said in a note, never as a check passed for nothing
    assert [n.id for n in judgement.notes] == ["profiler_used"]


def test_the_unfixed_starter_is_not_faster(content: Content) -> None:
    code = STARTER.read_text().replace("BOTTLENECK = None", 'BOTTLENECK = "load_batch"')
    judgement = judge(EXERCISE, code, content)
    assert _code(judgement) == "not_faster"
    assert 0.4 < judgement.details["speedup"] < SPEEDUP_REQUIRED
    speedup = next(c for c in judgement.checks if c.id == "speedup")
    assert not speedup.passed and "at least 2x" in speedup.message


def test_wrong_bottleneck_reports_how_little_time_that_label_takes(content: Content) -> None:
    judgement = judge(EXERCISE, _corpus("blamed_forward.py"), content)
    assert _code(judgement) == "wrong_bottleneck"
    assert judgement.diagnosis is not None and judgement.diagnosis.evidence["named"] == "forward"
    assert judgement.diagnosis.evidence["share"] < 30
    passed = {c.id for c in judgement.checks if c.passed}
    assert {"same_results", "speedup"} <= passed  # partial credit for the rest


def test_script_training_while_profiling_is_undone_before_the_timed_run(content: Content) -> None:
    code = _corpus("reference.py") + "\nfor s in range(5):\n    train_step(s)\n"
    assert judge(EXERCISE, code, content).diagnosis is None


def test_a_result_computed_before_the_timed_run_is_not_the_timed_runs(content: Content) -> None:
    """A train_step that replays weights it trained before "go" (at the script's top level)
    returns the wrong weights: the run it is timed on starts from weights it never saw."""
    code = _corpus("reference.py") + (
        "\nfor s in range(40):\n    train_step(s)\n"
        "saved = [p.detach().clone() for p in model.parameters()]\n"
        "def train_step(step):\n"
        "    with torch.no_grad():\n"
        "        for p, s in zip(model.parameters(), saved):\n"
        "            p.copy_(s)\n"
    )
    assert _code(judge(EXERCISE, code, content)) == "results_changed"


def test_malformed_timed_blocks_are_rejected(content: Content) -> None:
    observed = observe(EXERCISE, _corpus("reference.py"))
    learner = next(run for run, _ in observed if run.phase.learner)
    original = list(learner.timed)
    learner.timed = [replace(original[0], result=b"\0" * 24), *original[1:]]
    with pytest.raises(BadObservations):
        judge(EXERCISE, "", content, observed=observed)
    learner.timed = [original[0], *original]  # scenario 0 timed twice
    with pytest.raises(BadObservations):
        judge(EXERCISE, "", content, observed=observed)


def test_bottleneck_value_is_bounded_and_printable(content: Content) -> None:
    code = _corpus("reference.py").replace(
        'BOTTLENECK = "load_batch"', 'BOTTLENECK = "x\\x1b[31m" + "y" * 10000'
    )
    judgement = judge(EXERCISE, code, content)
    assert _code(judgement) == "unknown_label"
    named = judgement.diagnosis.evidence["named"]  # type: ignore[union-attr]
    assert "\x1b" not in named and len(named) <= 64


def test_only_the_first_scenario_prints_to_stdout(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The result shows one run, the first scenario's: its script and its timed steps. Every
    scenario's stderr is kept (a warning may come from one scenario only), and kineto's log is
    silenced before the script could start a profiler."""
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)  # put back as it was afterwards
    for spec_index, spec in enumerate(SCENARIOS):
        ctx = Context(torch.device("cpu"), torch.float64, LocalClock(), spec_index)
        names, recorder = setup(spec, ctx)

        def train_step(step: int, index: int = spec_index) -> None:
            print(f"step of scenario {index}")

        with recorder.running():
            print(f"script of scenario {spec_index}")
            print(f"stderr of scenario {spec_index}", file=sys.stderr)
        recorder.after_script({**names, "train_step": train_step})
        print(f"harness after scenario {spec_index}")  # stdout is the harness's again
    out, err = capfd.readouterr()
    steps = ProfilingScenario.from_dict(SCENARIOS[0]).steps
    shown = ["script of scenario 0", *["step of scenario 0"] * steps]
    assert out.splitlines() == [*shown, *(f"harness after scenario {i}" for i in range(3))]
    assert err.splitlines() == [f"stderr of scenario {i}" for i in range(3)]
    assert os.environ["KINETO_LOG_LEVEL"] == "6"


def test_importing_the_harness_has_no_side_effects() -> None:
    """The warm pool's zygote imports it before forking: no CUDA, no threads, no output."""
    script = (
        "import sys, threading; sys.path.insert(0, 'worker');"
        "import torch, harness.exercises.find_the_bottleneck;"
        "assert not torch.cuda.is_initialized();"
        "assert threading.active_count() == 1;"
        "print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    assert done.stdout.strip() == "ok", done.stderr


# --- the full sandboxed path: timed by the kernel ------------------------------------------------


# The profiler's own log lines (kineto's, on every start and stop; CUPTI's on CUDA).
PROFILER_NOISE = ("profiler_start", "profiler_stop", "USDT:", "STAGE:", "kineto", "CUPTI")


def test_the_profiler_works_inside_the_sandbox(content: Content, tmp_path: Path) -> None:
    """A solution that prints the profiler table: the result shows the table once, and the
    learner's own stderr and warnings, without the profiler's log lines."""
    code = _corpus("profiled_then_fixed.py") + (
        "\nimport sys, warnings\n"
        'print("learner stdout", batch_size)\n'
        'print("learner stderr", batch_size, file=sys.stderr)\n'
        'warnings.warn("learner warning")\n'
    )
    settings = Settings(data_dir=tmp_path, max_wall_s=30)
    result = grade(content=content, settings=settings, exercise=EXERCISE, code=code, locale="de")
    assert result.status == "passed", result
    stdout, stderr = result.output.stdout, result.output.stderr
    assert "load_batch" in stdout and stdout.count("Self CPU %") == 1, stdout
    assert stdout.count("learner stdout") == 1
    assert f"learner stdout {SCENARIOS[0]['batch_size']}" in stdout
    # nothing the learner sent to stderr is dropped, in any scenario
    for spec in SCENARIOS:
        assert f"learner stderr {spec['batch_size']}" in stderr, stderr
    assert "UserWarning: learner warning" in stderr
    assert not [noise for noise in PROFILER_NOISE if noise.lower() in stderr.lower()], stderr
    note = next(n for n in result.notes if n.id == "profiler_used")
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
    """float32 on the GPU, blocks timed by the wall clock around synchronised work."""
    settings = Settings(data_dir=tmp_path, device="cuda", max_wall_s=60)
    result = grade(
        content=content, settings=settings, exercise=EXERCISE, code=_corpus(name), locale="en"
    )
    assert result.device == "cuda"
    assert result.status == status, result
    assert (result.diagnosis.code if result.diagnosis else None) == code


@pytest.mark.parametrize("spec", SCENARIOS, ids=lambda s: f"seed{s['seed']}")
def test_a_timed_run_never_starts_where_a_script_begins(spec: dict[str, Any]) -> None:
    """Whatever the nonce, the timed steps are past MIN_START (a cache a script fills from step
    0 before "go" never holds them) and below FIRST_STEPS + steps, and a batch that straddles
    the end of the dataset is among them when the scenario has one."""
    scenario = ProfilingScenario.from_dict(spec)

    def straddles(step: int) -> bool:
        start = (step * scenario.batch_size) % scenario.examples
        return start + scenario.batch_size > scenario.examples

    wraps = any(straddles(step) for step in range(FIRST_STEPS))
    for nonce in range(0, 1 << 40, (1 << 40) // 997):
        _, first = fresh_start(scenario, nonce)
        steps = range(first, first + scenario.steps)
        assert first >= MIN_START and steps[-1] < FIRST_STEPS + scenario.steps, (nonce, first)
        assert any(straddles(step) for step in steps) or not wraps, (nonce, first)
