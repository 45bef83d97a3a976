"""What the worker asks a sandbox to run, and what comes back: a job is a list of phases, each
one forked process of the slot's zygote in a fresh cgroup of its own.

A phase either runs the learner's script (`learner=True`) or trusted code: a script of ours run
the way the learner's is, or one of the exercise's harness routines. A trusted phase never holds
a byte of learner code, so what the kernel measures of it (a baseline's memory peak, a planted
step's CPU time) is a trusted figure. Everything a phase reports about itself is an
observation; what the worker measures from outside (`PhaseRun.peak_bytes`, `TimedBlock.cpu_ns`)
is the kernel's.
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stream:
    data: bytes = b""
    total: int = 0

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)


@dataclass(frozen=True)
class Phase:
    """`name` "learner" runs the learner's script; any other name is trusted: it runs `script`
    (our own code, through exactly the learner's path, so that both carry the same overhead)
    or, without a script, the harness routine of that name (`TRUSTED_PHASES`)."""

    name: str
    scenarios: tuple[int, ...]  # indices into the job's scenarios, run in this order
    script: str | None = None
    timed_blocks: int = 0  # go/done intervals the phase may ask the worker to time
    # Trusted and deterministic: a slot may answer it again from an earlier run of the same
    # phase of the same scenarios (its memory peak does not change between jobs).
    cacheable: bool = False

    @property
    def learner(self) -> bool:
        return self.name == "learner"


@dataclass(frozen=True)
class SandboxJob:
    spec: dict[str, Any]  # {"exercise", "harness", "device", "scenarios"}
    code: str
    phases: tuple[Phase, ...]
    wall_s: float  # for all the learner's phases together
    memory_mb: int  # per phase
    use_gpu: bool = False


@dataclass(frozen=True)
class TimedBlock:
    """One go/done interval a phase asked for: the fresh `nonce` it was given at "go", what it
    sent back with "done", and what the worker measured between the two."""

    tag: int  # which block (the phase says: a scenario index; checked against the phase)
    nonce: int
    result: bytes
    cpu_ns: int | None  # the phase cgroup's CPU time (None without a cgroup)
    wall_ns: int


@dataclass
class PhaseRun:
    phase: Phase
    returncode: int | None
    observations: Stream
    stdout: Stream = field(default_factory=Stream)
    stderr: Stream = field(default_factory=Stream)
    peak_bytes: int | None = None  # its cgroup's memory peak (None without a cgroup)
    gpu_peak_bytes: int | None = None  # driver-level (NVML), on CUDA
    timed: list[TimedBlock] = field(default_factory=list)
    clock_error: str | None = None  # the go/done conversation broke (how)
    memory_exceeded: bool = False
    timed_out: bool = False
    wall_s: float = 0.0  # from handing the phase its fds to its answer (or its deadline)


@dataclass
class SandboxRun:
    phases: list[PhaseRun]
    wall_s: float

    @property
    def learner_phases(self) -> list[PhaseRun]:
        return [run for run in self.phases if run.phase.learner]

    @property
    def timed_out(self) -> bool:
        return any(run.timed_out for run in self.phases)

    @property
    def memory_exceeded(self) -> bool:
        return any(run.memory_exceeded for run in self.phases)

    def output(self, name: str) -> Stream:
        """The learner phases' stdout or stderr, in order, as one stream."""
        streams = [getattr(run, name) for run in self.learner_phases]
        return Stream(b"".join(s.data for s in streams), sum(s.total for s in streams))
