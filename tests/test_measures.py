"""What the worker measures from outside a phase's process (worker/cgroups.py, worker/pool.py):
the kernel's memory peak and CPU time of everything the phase ran, a clock the script cannot
move, and trusted phases measured once per slot."""

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gradlab.config import Settings
from gradlab.content.loader import Content
from worker.cgroups import roots
from worker.grading import grade
from worker.jobs import Phase, SandboxJob, SandboxRun
from worker.pool import Slot, WarmPool

pytestmark = pytest.mark.skipif(not roots(), reason="needs a cgroup hierarchy the worker may use")

ACCUMULATE = {"seed": 1, "accum_steps": 2, "microbatches": 2, "micro_batch_size": 2}
PROFILING = {"seed": 3, "examples": 256, "features": 8, "batch_size": 16, "steps": 4}
MIB = 1 << 20
CORPUS = Path(__file__).parent / "corpus"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmPool]:
    warm = WarmPool(Settings(data_dir=tmp_path_factory.mktemp("measures")), slots=1)
    yield warm
    warm.close()


def _run(pool: WarmPool, harness: str, scenario: dict, code: str, blocks: int = 0) -> SandboxRun:
    job = SandboxJob(
        spec={"exercise": "test", "harness": harness, "device": "cpu", "scenarios": [scenario]},
        code=textwrap.dedent(code),
        phases=(Phase("learner", (0,), timed_blocks=blocks),),
        wall_s=30,
        memory_mb=1024,
    )
    return pool.run(settings=pool.settings, job=job)


def test_the_peak_counts_what_the_phase_holds_in_a_child_process(pool: WarmPool) -> None:
    quiet = _run(pool, "accumulation", ACCUMULATE, "pass")
    busy = _run(
        pool,
        "accumulation",
        ACCUMULATE,
        """
        import os
        pid = os.fork()
        if pid == 0:
            block = bytearray(96 << 20)  # touched: zero-filled pages of the child's own
            os._exit(0)
        os.waitpid(pid, 0)
        """,
    )
    (quiet_phase,), (busy_phase,) = quiet.phases, busy.phases
    assert quiet_phase.peak_bytes is not None and busy_phase.peak_bytes is not None
    assert quiet_phase.peak_bytes < 32 * MIB
    assert busy_phase.peak_bytes - quiet_phase.peak_bytes >= 90 * MIB


def test_the_peak_counts_files_in_the_sandboxs_memory_filesystems(pool: WarmPool) -> None:
    quiet = _run(pool, "accumulation", ACCUMULATE, "pass").phases[0].peak_bytes
    parked = (
        _run(
            pool,
            "accumulation",
            ACCUMULATE,
            """
        import os
        with open("/dev/shm/parked", "wb") as f:
            f.write(b"x" * (64 << 20))
        os.unlink("/dev/shm/parked")
        """,
        )
        .phases[0]
        .peak_bytes
    )
    assert parked is not None and quiet is not None
    assert parked - quiet >= 60 * MIB


STEP = """
import os, threading, time

def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

def train_step(step):
    {body}
"""


def _block_cpu(pool: WarmPool, body: str) -> float:
    run = _run(pool, "find_the_bottleneck", PROFILING, STEP.format(body=body), blocks=1)
    (phase,) = run.phases
    assert phase.clock_error is None, phase.clock_error
    (block,) = phase.timed
    assert block.cpu_ns is not None
    return block.cpu_ns / 1e9


def test_a_timed_block_counts_cpu_spent_in_threads_and_children(pool: WarmPool) -> None:
    """Work moved to a thread or a forked process is still the phase's CPU time."""
    idle = _block_cpu(pool, "pass")
    thread = _block_cpu(
        pool, "t = threading.Thread(target=burn, args=(0.05,)); t.start(); t.join()"
    )
    child = _block_cpu(
        pool, "pid = os.fork()\n    if pid == 0:\n        burn(0.05); os._exit(0)\n"
        "    os.waitpid(pid, 0)",
    )  # fmt: skip
    assert idle < 0.05
    assert thread - idle >= 4 * 0.05 * 0.8  # four steps of 50 ms
    assert child - idle >= 4 * 0.05 * 0.8


def test_a_script_cannot_end_its_own_timed_block(pool: WarmPool, content: Content) -> None:
    """The script finds the clock socket and says "done" itself before doing the work: the
    conversation breaks, and that is the learner's doing (a runtime error), never a pass."""
    forger = (content.exercises["profiling/find-the-bottleneck"].starter_code).replace(
        "BOTTLENECK = None", 'BOTTLENECK = "load_batch"'
    ) + textwrap.dedent(
        """
            import json, os, socket, struct
            for fd in range(3, 64):
                try:
                    s = socket.socket(fileno=os.dup(fd))
                except OSError:
                    continue
                header = json.dumps({"k": "done", "bytes": 0}).encode()
                try:
                    s.sendall(struct.pack(">I", len(header)) + header)
                except OSError:
                    pass
            """
    )
    result = grade(
        content=content,
        settings=pool.settings,
        exercise="profiling/find-the-bottleneck",
        code=forger,
        locale="en",
        runner=pool.run,
    )
    assert result.status != "passed"
    assert result.error is not None and result.error.kind == "runtime_error"


def test_trusted_phases_are_measured_once_per_slot(pool: WarmPool, content: Content) -> None:
    ran: list[str] = []
    original = Slot._run_phase

    def counting(self, job, phase, *args):  # type: ignore[no-untyped-def]
        ran.append(phase.name)
        return original(self, job, phase, *args)

    Slot._run_phase = counting  # type: ignore[method-assign]
    try:
        for _ in range(2):
            code = content.exercises["gradient-accumulation/accumulate"].starter_code
            grade(content=content, settings=pool.settings, runner=pool.run, locale="en",
                  exercise="gradient-accumulation/accumulate", code=code)  # fmt: skip
    finally:
        Slot._run_phase = original  # type: ignore[method-assign]
    assert ran.count("learner") == 2
    assert ran.count("one_at_a_time") == ran.count("kept_graphs") == ran.count("whole_window") <= 1


def _noisy_runner(
    pool: WarmPool, inflated_attempts: set[int], calls: list[int]
) -> Callable[..., SandboxRun]:
    """pool.run, with the learner phases' memory peaks raised by 64 MiB on the given attempts
    (1-based): what library pages faulted back in under memory pressure do to a phase."""

    def run(*, settings: Settings, job: SandboxJob) -> SandboxRun:
        calls.append(1)
        result = pool.run(settings=settings, job=job)
        if len(calls) in inflated_attempts:
            for phase in result.learner_phases:
                assert phase.peak_bytes is not None
                phase.peak_bytes += 64 * MIB
        return result

    return run


@pytest.mark.parametrize(
    ("solution", "inflated", "status", "attempts"),
    [
        ("reference", {1}, "passed", 2),  # noise on the first run: the second clears it
        ("reference", {1, 2}, "failed", 2),  # over budget twice: failed on the measure
        ("unscaled", set(), "failed", 1),  # wrong numbers: no second look
    ],
)
def test_a_failure_on_a_measure_alone_gets_a_second_whole_attempt(
    pool: WarmPool,
    content: Content,
    solution: str,
    inflated: set[int],
    status: str,
    attempts: int,
) -> None:
    calls: list[int] = []
    result = grade(
        content=content,
        settings=pool.settings,
        exercise="gpu-memory/fit-the-budget",
        code=(CORPUS / "fit-the-budget" / f"{solution}.py").read_text(),
        locale="en",
        runner=_noisy_runner(pool, inflated, calls),
    )
    assert result.status == status, result
    assert len(calls) == attempts
    if inflated == {1, 2}:
        assert result.diagnosis is not None and result.diagnosis.code == "over_budget"
