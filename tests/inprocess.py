"""Run an exercise's phases in this process, without a sandbox, and judge them: for unit tests
of a grader's logic. Measurements the kernel takes in the real sandbox (memory peaks, CPU time)
are not available here; tests pass the figures they want the judge to see."""

import contextlib
import io
from collections.abc import Iterator, Mapping

import torch

from gradlab.content.loader import Content
from worker.graders import get_grader
from worker.graders.kit import GradedRun, Judgement, PhaseResult, Texts
from worker.harness.context import LocalClock
from worker.harness.run import run_phase
from worker.jobs import PhaseRun, Stream, TimedBlock
from worker.observations import Observations, parse


@contextlib.contextmanager
def _torch_put_back() -> Iterator[None]:
    """A script run here may patch torch's functions or leave autocast on, as the cheats in
    tests/corpus do. In the sandbox its process ends with it; this one runs the next tests, so
    torch's module attributes and the CPU autocast switch are put back as they were."""
    saved = dict(vars(torch))
    autocast = torch.is_autocast_enabled("cpu")
    try:
        yield
    finally:
        for name in set(vars(torch)) - set(saved):
            delattr(torch, name)
        for name, value in saved.items():
            if vars(torch).get(name) is not value:
                setattr(torch, name, value)
        torch.set_autocast_enabled("cpu", autocast)


def observe(
    exercise: str, code: str, *, device: str = "cpu"
) -> list[tuple[PhaseRun, Observations]]:
    """Every phase of the exercise's job, run here: the learner phases on `code`."""
    grader = get_grader(exercise)
    spec = {"exercise": exercise, "harness": grader.harness, "device": device,
            "scenarios": grader.scenarios}  # fmt: skip
    runs = []
    for phase in grader.phases(device):
        out = io.BytesIO()
        out.close = lambda: None  # type: ignore[method-assign]  # run_phase closes its channel
        clock = LocalClock()
        request = {
            "spec": spec,
            "phase": phase.name,
            "indices": list(phase.scenarios),
            "code": code if phase.learner else phase.script,
        }
        with _torch_put_back():
            run_phase(request, out, clock)
        timed = [
            TimedBlock(tag, nonce, result, round(seconds * 1e9), round(seconds * 1e9))
            for tag, nonce, result, seconds in clock.blocks
        ]
        data = out.getvalue()
        run = PhaseRun(phase, 0, Stream(data, len(data)), timed=timed)
        runs.append((run, parse(data)))
    return runs


def judge(
    exercise: str,
    code: str,
    content: Content,
    *,
    device: str = "cpu",
    locale: str = "en",
    peaks: Mapping[str, int] | None = None,
    observed: list[tuple[PhaseRun, Observations]] | None = None,
) -> Judgement:
    """The judgement of `code` (or of already `observed` phases), with `peaks` (phase name ->
    bytes) standing in for the kernel's memory measurements."""
    grader = get_grader(exercise)
    phases = []
    for run, observations in observed or observe(exercise, code, device=device):
        error = observations.meta.get("error")
        assert error is None, error
        if peaks is not None:
            run.peak_bytes = peaks[run.phase.name]
        phases.append(PhaseResult(run, observations))
    graded = GradedRun(device=device, scenarios=grader.scenarios, phases=phases)
    return grader.judge(graded, Texts(content=content, exercise=exercise, locale=locale))
