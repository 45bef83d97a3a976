"""Unit tests of the gpu-memory exercise: memory accounting on known graphs, the scenario
design, fingerprints, and the trusted judgement on hand-made observations."""

import io
import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
from worker.graders.gpu_memory import SCENARIOS
from worker.graders.memory_problem import MemoryProblem
from worker.harness.memory_problem import MemoryScenario, fingerprint_vector

from gradlab.config import PROJECT_ROOT
from gradlab.content.loader import Content
from worker.graders import get_grader
from worker.harness import gpu_memory
from worker.harness.run import run_job
from worker.observations import BadObservations, Observations, parse

CPU = torch.device("cpu")
EXERCISE = "gpu-memory/fit-the-budget"
CORPUS = Path(__file__).parent / "corpus" / "fit-the-budget"
F64 = 8  # bytes per float64


def _measure(step) -> int:  # type: ignore[no-untyped-def]
    tracker = gpu_memory.LiveTensorTracker(CPU)
    with tracker:
        step()
    return tracker.peak


# --- memory accounting -------------------------------------------------------------------


def test_tracker_counts_new_storage_once_and_frees_it() -> None:
    base = torch.zeros(1000, dtype=torch.float64)  # allocated before: never counted
    tracker = gpu_memory.LiveTensorTracker(CPU)
    with tracker:
        a = base + 1  # new: 8000 bytes
        view = a[10:20].view(2, 5)  # a view: no new memory
        a.mul_(2)  # in place: no new memory
        b = torch.ones(500, dtype=torch.float64)  # new: 4000 bytes
        assert tracker.total == 12000
        del a  # still alive through the view
        assert tracker.total == 12000
        del view
        assert tracker.total == 4000
        del b
    assert tracker.total == 0
    assert tracker.peak == 12000


def test_tracker_ignores_what_it_does_while_paused() -> None:
    tracker = gpu_memory.LiveTensorTracker(CPU)
    with tracker:
        with tracker.pause():
            hidden = torch.ones(100, dtype=torch.float64)
        seen = torch.ones(10, dtype=torch.float64)
    assert tracker.peak == 10 * F64
    del hidden, seen


def test_tracker_sees_the_activations_of_a_known_graph() -> None:
    """Linear -> Tanh -> Linear on n rows: the peak holds the saved tanh output (n x w) and
    the hidden pre-activation is freed by then or counted once; never less than what
    backward needs."""
    n, w = 256, 64
    model = nn.Sequential(nn.Linear(8, w), nn.Tanh(), nn.Linear(w, 1)).double()
    x = torch.randn(n, 8, dtype=torch.float64)
    peak = _measure(lambda: model(x).sum().backward())
    activation = n * w * F64
    assert 2 * activation <= peak <= 4 * activation  # pre-activation + tanh out (+ grads)


def test_non_reentrant_checkpoint_is_measured_through() -> None:
    """Outer saved_tensors_hooks never see inside non-reentrant checkpoint (the innermost hooks
    win), which is why the tracker, not saved-tensor counting, is the CPU measure."""
    scenario = MemoryScenario.from_dict(SCENARIOS[0])
    problem = MemoryProblem(scenario)
    model, x, y = problem.model, problem.x, problem.y
    loss_fn = nn.MSELoss()

    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn(checkpoint(model, x, use_reentrant=False), y).backward()
    activations = 16 * len(x) * 32  # one saved tanh output per hidden layer
    assert sum(saved) < activations / 10  # the hooks saw only the loss's inputs and x
    model.zero_grad(set_to_none=True)

    plain = _measure(lambda: loss_fn(model(x), y).backward())
    model.zero_grad(set_to_none=True)
    whole = _measure(lambda: loss_fn(checkpoint(model, x, use_reentrant=False), y).backward())
    model.zero_grad(set_to_none=True)
    segments = _measure(
        lambda: loss_fn(checkpoint_sequential(model, 4, x, use_reentrant=False), y).backward()
    )
    assert whole >= 0.95 * plain  # recomputation rebuilds every activation during backward
    assert segments <= 0.6 * plain


def _ratio(scenario: dict, code: str) -> float:
    names, recorder = gpu_memory.setup(scenario, CPU, torch.float64)
    with recorder.running():
        exec(code, names)
    memory = recorder.observations("s")[1]["memory"]
    return memory["step"]["tracked"] / memory["baseline"]["tracked"]


MICRO = """
for xc, yc in zip(x.tensor_split({k}), y.tensor_split({k})):
    (loss_fn(model(xc), yc) * len(xc) / len(x)).backward()
optimizer.step()
"""
PLAIN = "loss_fn(model(x), y).backward()\noptimizer.step()"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: str(s["seed"]))
def test_scenarios_separate_the_plain_step_from_the_techniques(scenario: dict) -> None:
    """Activations dominate: the plain step measures 1, more chunks measure less, and the
    correct techniques of the corpus fit every budget with room to spare."""
    budget = scenario["budget"]
    assert _ratio(scenario, PLAIN) == pytest.approx(1.0)
    ratios = [_ratio(scenario, MICRO.format(k=k)) for k in (2, 3, 4)]
    assert ratios == sorted(ratios, reverse=True)
    assert ratios[-1] <= budget - 0.1
    assert _ratio(scenario, MICRO.format(k=math.ceil(2 / budget))) <= budget - 0.1


def test_scenario_design() -> None:
    """At least 3 scenarios; SGD and Adam; several budgets; a batch size that no chunk count
    from 2 to 8 divides; nothing that a fixed chunk size fits everywhere."""
    assert len(SCENARIOS) >= 3
    assert {s["optimizer"] for s in SCENARIOS} == {"sgd", "adam"}
    assert len({s["budget"] for s in SCENARIOS}) >= 3
    assert any(all(s["examples"] % k for k in range(2, 9)) for s in SCENARIOS)
    assert len({s["seed"] for s in SCENARIOS}) == len(SCENARIOS)


def test_baseline_is_measured_on_a_copy() -> None:
    names, recorder = gpu_memory.setup(SCENARIOS[0], CPU, torch.float64)
    assert all(p.grad is None for p in names["model"].parameters())
    assert recorder.baseline["tracked"] > 0 and recorder.baseline["allocated"] is None
    problem = MemoryProblem(MemoryScenario.from_dict(SCENARIOS[0]))
    params = torch.cat([p.detach().reshape(-1) for p in names["model"].parameters()])
    assert torch.equal(params, problem.initial)


# --- fingerprints ------------------------------------------------------------------------


def test_fingerprints_identify_rows_even_in_float32() -> None:
    problem = MemoryProblem(MemoryScenario.from_dict(SCENARIOS[1]))
    rows = [5, 0, 396, 200]
    exact = problem.x[rows] @ fingerprint_vector()
    assert problem.match_rows(exact, 1e-9) == rows
    rounded = problem.x[rows].float().double() @ fingerprint_vector()
    assert problem.match_rows(rounded, 1e-5) == rows
    assert problem.match_rows(exact + 1.0, 1e-9) is None
    assert problem.match_rows(torch.tensor([math.nan], dtype=torch.float64), 1e-9) is None


# --- judgement ---------------------------------------------------------------------------


def _observations(code: str, scenarios: list[dict] | None = None) -> Observations:
    spec = {"harness": "gpu_memory", "device": "cpu", "scenarios": scenarios or SCENARIOS}

    class Channel(io.BytesIO):
        def close(self) -> None:
            self.data = self.getvalue()

    out = Channel()
    run_job(spec, code, out)
    return parse(out.data)


def test_judgement_of_the_reference(content: Content) -> None:
    grader = get_grader("gpu_memory.fit_the_budget")
    code = (CORPUS / "reference.py").read_text()
    judgement = grader.judge(_observations(code), exercise=EXERCISE, locale="de", content=content)
    assert judgement.diagnosis is None
    assert [c.id for c in judgement.checks] == [
        "runs",
        "one_step",
        "gradients",
        "parameters",
        "memory",
    ]
    assert all(c.passed for c in judgement.checks)
    assert max(judgement.details["grad_errors"]) < 1e-12
    assert all(r < 0.45 for r in judgement.details["peak_ratios"])
    assert "%" in judgement.checks[-1].message and "{" not in judgement.checks[-1].message


def test_plain_step_gets_partial_credit_and_the_evidence(content: Content) -> None:
    grader = get_grader("gpu_memory.fit_the_budget")
    obs = _observations(PLAIN)
    judgement = grader.judge(obs, exercise=EXERCISE, locale="es", content=content)
    assert judgement.diagnosis is not None and judgement.diagnosis.code == "over_budget"
    assert judgement.diagnosis.evidence == {"scenario": 1, "peak": "100", "budget": "70"}
    assert "100 %" in judgement.diagnosis.message
    earned = sum(c.points for c in judgement.checks)
    assert earned == 5.0 and sum(c.max_points for c in judgement.checks) == 7.0


def test_an_empty_script_earns_no_memory_points(content: Content) -> None:
    grader = get_grader("gpu_memory.fit_the_budget")
    judgement = grader.judge(_observations("pass"), exercise=EXERCISE, locale="en", content=content)
    memory = next(c for c in judgement.checks if c.id == "memory")
    assert not memory.passed and "no optimizer step" in memory.message
    assert judgement.diagnosis is not None and judgement.diagnosis.code == "never_stepped"


def test_malformed_observations_are_rejected(content: Content) -> None:
    grader = get_grader("gpu_memory.fit_the_budget")
    obs = _observations(PLAIN, SCENARIOS)

    def judge(meta: dict | None = None, tensors: dict | None = None) -> None:
        broken = Observations(meta=meta or obs.meta, tensors=tensors or obs.tensors)
        grader.judge(broken, exercise=EXERCISE, locale="en", content=content)

    with pytest.raises(BadObservations):
        judge(tensors={**obs.tensors, "s0.grads": obs.tensors["s0.grads"].float()})
    with pytest.raises(BadObservations):
        judge(tensors={**obs.tensors, "s0.final": obs.tensors["s0.final"][:-1]})
    for field, value in [
        ("steps", -1),
        ("forward_sizes", ["1"]),
        ("forward_sizes", [1] * 5000),
        ("rows_truncated", "no"),
        ("memory", {"baseline": {"tracked": 0}, "step": {"tracked": 1}}),
        ("memory", {"baseline": {}, "step": {}}),
    ]:
        scenarios = [dict(m) for m in obs.meta["scenarios"]]
        scenarios[0][field] = value
        with pytest.raises(BadObservations):
            judge(meta={**obs.meta, "scenarios": scenarios})
    with pytest.raises(BadObservations):
        judge(meta={**obs.meta, "scenarios": obs.meta["scenarios"][:1]})


def test_starter_code_is_the_plain_step() -> None:
    starter = (PROJECT_ROOT / "lessons/gpu-memory/exercises/fit-the-budget.py").read_text()
    assert "loss.backward()" in starter and "optimizer.step()" in starter


@pytest.mark.gpu
def test_cuda_meters_agree_on_the_corpus_techniques() -> None:
    """On CUDA the allocator's peak decides; the tracker measures the same thing without the
    allocator's rounding: both ratios must tell the same story."""
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in ("reference", "checkpoint_sequential", "starter", "two_chunks"):
        code = (CORPUS / f"{name}.py").read_text()
        for scenario in SCENARIOS:
            names, recorder = gpu_memory.setup(scenario, device, torch.float32)
            with recorder.running():
                exec(code, names)
            memory = recorder.observations("s")[1]["memory"]
            allocated = memory["step"]["allocated"] / memory["baseline"]["allocated"]
            tracked = memory["step"]["tracked"] / memory["baseline"]["tracked"]
            assert abs(allocated - tracked) < 0.05, (name, scenario, allocated, tracked)
