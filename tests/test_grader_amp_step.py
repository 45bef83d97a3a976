"""The amp-step grader: scenario design, the low-precision witness and its margins, the
numerical order check, diagnoses for torch's internal errors, robustness to malformed
observations. Corpus verdicts (cheats included) are in test_grader.py; these tests run the
harness in-process (tests/inprocess.py) where a grader's internals are looked at.
"""

import copy
import math
from pathlib import Path

import pytest
import torch

from gradlab.content.loader import Content
from tests.inprocess import judge, observe
from worker.graders import get_grader
from worker.graders.exercises.amp_step.grader import (
    GRAD_TOL,
    PARAM_TOL,
    WITNESS_APART,
    WITNESS_MATCH,
)
from worker.graders.exercises.amp_step.reference import AmpProblem
from worker.harness.exercises.amp_step.problem import AmpScenario, make_data, make_model, poisoned
from worker.observations import BadObservations, Observations

CORPUS = Path(__file__).parent / "corpus" / "amp-step"
EXERCISE = "mixed-precision/amp-step"
SCENARIOS = [AmpScenario.from_dict(s) for s in get_grader(EXERCISE).scenarios]
REFERENCE = (CORPUS / "reference.py").read_text()


def _judge(code: str, content: Content, device: str = "cpu"):  # type: ignore[no-untyped-def]
    return judge(EXERCISE, code, content, device=device)


# --- scenario design ---------------------------------------------------------------------


def test_hidden_scenarios_vary_everything_a_loop_could_hard_code() -> None:
    assert len(SCENARIOS) >= 3
    for field in ("seed", "batches", "batch_size", "inf_batch", "lr", "momentum", "max_norm"):
        assert len({getattr(s, field) for s in SCENARIOS}) > 1, field
    assert any(s.inf_batch == 0 for s in SCENARIOS)  # the very first step overflows
    assert any(s.inf_batch == s.batches - 1 for s in SCENARIOS)  # ... and the very last
    assert {s.poison for s in SCENARIOS} == {"nan", "inf"}
    assert all(0 <= s.inf_batch < s.batches for s in SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: f"seed{s.seed}")
def test_some_steps_clip_and_some_do_not(scenario: AmpScenario) -> None:
    """On the reference trajectory, at least one step clips by 30% or more (so a missing clip
    is visible), at least one does not clip, and no step's norm is within 5% of max_norm (so
    mixed-precision noise along the learner's trajectory cannot flip a clipping decision)."""
    _, norms = AmpProblem(scenario).reference_run()
    ratios = [norm / scenario.max_norm for norm in norms]
    assert len(ratios) == scenario.batches - 1
    assert max(ratios) >= 1.3, ratios
    assert min(ratios) <= 0.95, ratios
    assert all(abs(math.log(r)) >= 0.05 for r in ratios), ratios


def test_the_poisoned_batch_really_overflows() -> None:
    """In the sandbox's data, the poisoned batch's loss is not finite (inf and NaN variants)."""
    for s in SCENARIOS:
        x, y = make_data(s)
        x = poisoned(s, x).float()
        model = make_model(s).float()
        start = s.inf_batch * s.batch_size
        batch = slice(start, start + s.batch_size)
        loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch].float())
        assert not torch.isfinite(loss)
        clean = slice(0, s.batch_size) if s.inf_batch else slice(s.batch_size, 2 * s.batch_size)
        assert torch.isfinite(torch.nn.functional.mse_loss(model(x[clean]), y[clean].float()))


# --- tolerances ----------------------------------------------------------------------------


def test_correct_loop_is_well_inside_the_tolerances(content: Content) -> None:
    """Measured on CPU (bfloat16): gradients <= 0.007, parameters <= 0.0033 relative; the
    tolerances (0.03, 0.02) leave a margin of 4x and 6x."""
    judgement = _judge(REFERENCE, content)
    assert judgement.diagnosis is None and all(c.passed for c in judgement.checks)
    assert max(judgement.details["grad_errors"]) <= GRAD_TOL["cpu"] / 4
    assert max(judgement.details["param_errors"]) <= PARAM_TOL["cpu"] / 4


@pytest.mark.parametrize(
    ("name", "detail", "tolerance"),
    [
        ("hardcoded_max_norm.py", "grad_errors", GRAD_TOL["cpu"]),  # 0.16 (scenario 2)
        ("not_clipped.py", "grad_errors", GRAD_TOL["cpu"]),  # 0.33 or more
        ("extra_decay.py", "param_errors", PARAM_TOL["cpu"]),  # 0.18 or more
    ],
)
def test_closest_wrong_loops_are_far_outside_the_tolerances(
    content: Content, name: str, detail: str, tolerance: float
) -> None:
    judgement = _judge((CORPUS / name).read_text(), content)
    assert max(judgement.details[detail]) >= 3 * tolerance


def test_the_witness_separates_low_precision_from_float32_by_far(content: Content) -> None:
    """Measured on CPU: a correct loop's gradients are the autocast recomputation's, rounding
    for rounding (distance 0), and their float32 counterpart is one full gap away; a loop in
    float32 is the mirror image. The thresholds (0.25 and 0.5 of the gap) sit between."""
    correct = _judge(REFERENCE, content).details["witness"]
    for scenario in correct:
        for auto, f32, gap in zip(*scenario.values(), strict=True):
            assert gap > 1e-3  # bfloat16 moves every gradient measurably
            assert auto <= WITNESS_MATCH * gap / 10
            assert f32 >= 2 * WITNESS_APART * gap * 0.95
    float32 = _judge((CORPUS / "no_autocast.py").read_text(), content)
    for scenario in float32.details["witness"]:
        for auto, f32, gap in zip(*scenario.values(), strict=True):
            assert auto >= 4 * WITNESS_MATCH * gap * 0.9
            assert f32 <= WITNESS_APART * gap / 10


def test_no_autocast_is_caught_by_the_witness_alone(content: Content) -> None:
    """float32 gradients are as close to the right ones as bfloat16 noise: within the gradient
    tolerance, so only the witness can tell, and it does."""
    judgement = _judge((CORPUS / "no_autocast.py").read_text(), content)
    assert max(judgement.details["grad_errors"]) < GRAD_TOL["cpu"] / 3
    failed = [c.id for c in judgement.checks if not c.passed]
    assert failed == ["autocast"] and judgement.diagnosis.code == "autocast_not_used"


def test_autocast_flags_forged_in_the_process_do_not_fool_the_witness(content: Content) -> None:
    """The forward runs in float32 while every flag the harness could read says autocast: the
    witness fails it and the diagnosis says what the numbers show."""
    code = """
torch.is_autocast_enabled = lambda *a, **k: True
torch.get_autocast_dtype = lambda *a, **k: amp_dtype
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
"""
    judgement = _judge(code, content)
    failed = [c.id for c in judgement.checks if not c.passed]
    assert failed == ["autocast"] and judgement.diagnosis.code == "forward_in_float32"


def test_order_is_read_off_the_gradient_norms(content: Content) -> None:
    """Clipping before unscaling, no clipping and a backward without scaling each give every
    update a gradient norm other than min(max_norm, |unscaled|): the order check fails on the
    numbers, whatever the harness saw of the calls."""
    for name in ("clip_before_unscale.py", "not_clipped.py", "backward_not_scaled.py"):
        checks = {c.id: c.passed for c in _judge((CORPUS / name).read_text(), content).checks}
        assert not checks["order"], name
    checks = {c.id: c.passed for c in _judge(REFERENCE, content).checks}
    assert all(checks.values())


def test_missing_update_is_a_diagnosis_not_a_torch_error(content: Content) -> None:
    judgement = _judge((CORPUS / "no_update.py").read_text(), content)
    assert judgement.diagnosis.code == "scale_not_updated"
    assert judgement.diagnosis.evidence["batch"] == 2  # torch would have raised on batch 2
    assert "torch stopped your loop" in judgement.diagnosis.message
    assert not judgement.checks[0].passed  # "runs": the script was stopped on batch 2


def test_torchs_internal_errors_with_a_known_cause_get_a_diagnosis(content: Content) -> None:
    """What torch itself would say ("No inf checks were recorded", "unscale_() has already been
    called") names no mistake: the learner gets the cause instead."""
    cases = {
        "zero_grad_before_unscale.py": "grads_cleared_before_step",
        "unscale_twice.py": "unscaled_twice",
        "update_before_step.py": "wrong_order",
    }
    for name, code in cases.items():
        judgement = _judge((CORPUS / name).read_text(), content)
        assert judgement.diagnosis.code == code, name
        assert "No inf checks" not in judgement.diagnosis.message or code != "wrong_order"


def test_clip_function_is_restored_after_the_script() -> None:
    original = torch.nn.utils.clip_grad_norm_
    observe(EXERCISE, "raise ValueError('boom')")
    observe(EXERCISE, (CORPUS / "no_update.py").read_text())
    assert torch.nn.utils.clip_grad_norm_ is original
    assert torch.nn.utils.clip_grad.clip_grad_norm_ is original


def test_every_locale_message_fills_in(content: Content) -> None:
    """Each diagnosis renders without leftover braces in every locale."""
    observed = observe(EXERCISE, (CORPUS / "clip_after_step.py").read_text())
    for locale in ("en", "es", "de", "tr"):
        judgement = judge(EXERCISE, "", content, locale=locale, observed=observed)
        assert judgement.diagnosis.code == "wrong_order"
        assert "{" not in judgement.diagnosis.message and "→" in judgement.diagnosis.message
        assert all("{" not in c.message for c in judgement.checks)


# --- trust boundary --------------------------------------------------------------------------


def _tampered(observations: Observations, change) -> Observations:  # type: ignore[no-untyped-def]
    meta = copy.deepcopy(observations.meta)
    tensors = dict(observations.tensors)
    change(meta, tensors)
    return Observations(meta=meta, tensors=tensors)


TAMPERINGS = {
    "events_not_a_list": lambda m, t: m["scenarios"][0].update(events="x"),
    "unknown_event": lambda m, t: m["scenarios"][0]["events"].append({"i": 0, "k": "rm -rf"}),
    "flag_not_bool": lambda m, t: m["scenarios"][0]["events"].append(
        {"i": 0, "k": "backward", "scaled": "yes", "dirty": False}
    ),
    "too_many_events": lambda m, t: m["scenarios"][0].update(
        events=[{"i": 0, "k": "scale"}] * 5000
    ),
    "scale_not_a_number": lambda m, t: m["scenarios"][0]["events"].append(
        {"i": 0, "k": "update", "scale": "big"}
    ),
    "step_records_do_not_line_up": lambda m, t: m["scenarios"][0]["step_meta"].pop(),
    "wrong_width": lambda m, t: t.update({"s0.final": torch.zeros(3, dtype=torch.float64)}),
    "wrong_dtype": lambda m, t: t.update({"s0.grads": t["s0.grads"].float()}),
    "missing_scenario": lambda m, t: m["scenarios"].pop(),
    "unknown_stop_reason": lambda m, t: m["scenarios"][0].update(stopped="because"),
    "bool_as_int": lambda m, t: m["scenarios"][0].update(steps=True),
    "too_many_dtypes": lambda m, t: m["scenarios"][0].update(autocast_dtypes=["a"] * 50),
}


@pytest.mark.parametrize("name", sorted(TAMPERINGS))
def test_malformed_observations_are_rejected(content: Content, name: str) -> None:
    ((run, observations),) = observe(EXERCISE, REFERENCE)
    tampered = _tampered(observations, TAMPERINGS[name])
    with pytest.raises(BadObservations):
        judge(EXERCISE, "", content, observed=[(run, tampered)])


def test_importing_the_harness_initialises_no_cuda() -> None:
    import subprocess
    import sys

    code = "import torch, worker.harness.exercises.amp_step; print(torch.cuda.is_initialized())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


# --- CUDA (fp16) -----------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_correct_loop_within_tolerance_and_wrong_ones_outside(content: Content) -> None:
    """fp16 has a 3-bit finer mantissa than bf16: expect errors ~8x below the CPU ones. Prints
    the measured numbers so the CUDA tolerances can be revisited."""
    judgement = _judge(REFERENCE, content, device="cuda")
    print("cuda reference errors", judgement.details)
    assert judgement.diagnosis is None and all(c.passed for c in judgement.checks)
    assert max(judgement.details["grad_errors"]) <= GRAD_TOL["cuda"] / 4
    assert max(judgement.details["param_errors"]) <= PARAM_TOL["cuda"] / 4
    wrong = _judge((CORPUS / "not_clipped.py").read_text(), content, device="cuda")
    assert wrong.diagnosis.code == "not_clipped"
    assert max(wrong.details["grad_errors"]) >= 3 * GRAD_TOL["cuda"]
