"""One micro-batch at a time, proven by memory: the kernel's peak of the learner's phase placed
among the peaks of three trusted phases that train the same scenarios with no learner code in
them (docs/grading-integrity.md, "memory witnesses")."""

from dataclasses import dataclass
from typing import Any

from worker.graders.kit import Finding, GradedRun, Unmeasured, memory_peak, mib

# The trusted references must stand apart by this much for the memory verdict to mean anything
# (the noise of a peak between runs is ~0.5 MiB; the witnesses put them 7+ MiB apart).
MIN_SEPARATION = 3 << 20
# The trusted phases: our own loops, run exactly as the learner's script is.
TRUSTED = {
    "one_at_a_time": """
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    for x, y in window:
        out = model(x)
        if "vocab_size" in globals():
            out, y = out.reshape(-1, vocab_size), y.reshape(-1)
        (loss_fn(out, y) / len(window)).backward()
    optimizer.step()
    optimizer.zero_grad()
""",
    "kept_graphs": """
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    losses = []
    for x, y in batches[start : start + accum_steps]:
        out = model(x)
        if "vocab_size" in globals():
            out, y = out.reshape(-1, vocab_size), y.reshape(-1)
        losses.append(loss_fn(out, y))
    torch.stack(losses).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
""",
    "whole_window": """
batches = list(loader)
for start in range(0, len(batches), accum_steps):
    window = batches[start : start + accum_steps]
    x = torch.cat([x for x, _ in window])
    y = torch.cat([y for _, y in window])
    out = model(x)
    if "vocab_size" in globals():
        out, y = out.reshape(-1, vocab_size), y.reshape(-1)
    loss_fn(out, y).backward()
    optimizer.step()
    optimizer.zero_grad()
""",
}


@dataclass
class MemoryVerdict:
    """The learner's peak placed among the trusted phases' peaks (bytes)."""

    peak: int
    one_at_a_time: int
    kept_graphs: int
    whole_window: int

    @property
    def limit(self) -> int:
        """Halfway between one micro-batch at a time and the cheapest way of holding a window."""
        return (self.one_at_a_time + min(self.kept_graphs, self.whole_window)) // 2

    @property
    def passed(self) -> bool:
        return self.peak <= self.limit

    @property
    def held_whole_window(self) -> bool:
        return self.peak > (self.kept_graphs + self.whole_window) // 2

    def values(self) -> dict[str, Any]:
        return {"peak": mib(self.peak), "expected": mib(self.one_at_a_time)}


def memory_verdict(run: GradedRun) -> MemoryVerdict:
    peaks = {
        name: memory_peak(run.trusted(name, 0).run, run.device) for name in ("learner", *TRUSTED)
    }
    verdict = MemoryVerdict(
        peaks["learner"], peaks["one_at_a_time"], peaks["kept_graphs"], peaks["whole_window"]
    )
    if min(verdict.kept_graphs, verdict.whole_window) - verdict.one_at_a_time < MIN_SEPARATION:
        raise Unmeasured(f"the memory witnesses do not stand apart on this machine: {peaks}")
    return verdict


def memory_finding(verdict: MemoryVerdict, window: tuple[int, int] | None) -> Finding:
    """Which way the learner held a window: the peak says whole windows or kept graphs; the
    fingerprints, when they saw a window go through the model (`window`: the scenario and the
    forward's examples), say so too and show its size."""
    values = verdict.values()
    if window is not None:
        return Finding("microbatches_not_used", values, window[0], {"batch_size": window[1]})
    if verdict.held_whole_window:
        return Finding("microbatches_not_used", values)
    return Finding("graphs_kept_alive", values)
