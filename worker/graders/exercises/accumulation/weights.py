"""The weight each micro-batch received in each update, solved by least squares from each
micro-batch's own gradient (recomputed at the parameters in effect when it was consumed): the
pattern names the mistake, and the weights are the chart on the result page. Feedback only.
"""

import math

import torch

from worker.graders.exercises.accumulation.recording import Recording
from worker.graders.exercises.accumulation.reference import AccumulationProblem
from worker.graders.kit import Finding, rel

SPREAD = 0.02  # weights within 2% of a pattern count as following it
LEAK = 1e-3  # a weight above 0.1% of the window's largest is not noise (solves are exact)
RESIDUAL = 1e-3  # least squares explains the update (else: the update is not a mix of gradients)
CHART_STEPS = 8  # diagnosis.evidence["weights"]: at most this many optimizer steps...
CHART_MICROBATCHES = 32  # ...and micro-batches, rounded to CHART_DIGITS decimals
CHART_DIGITS = 4


def _theta_of(rec: Recording, consumed: list[int], j: int) -> torch.Tensor:
    """Parameters in effect when micro-batch j was consumed: those of the first update that
    came after it (params change only at updates)."""
    k = next((k for k, count in enumerate(consumed) if count > j), len(consumed) - 1)
    return rec.params[k]


def _columns(problem: AccumulationProblem, rec: Recording, consumed: list[int]) -> torch.Tensor:
    return torch.stack(
        [problem.microbatch_gradient(_theta_of(rec, consumed, j), j) for j in range(consumed[-1])],
        1,
    )


def weight_chart(
    problem: AccumulationProblem, rec: Recording, consumed: list[int]
) -> dict[str, list[list[float]]] | None:
    """The weight each micro-batch's loss got in each optimizer step (least squares, as in the
    diagnosis) next to the weights of a correct loop, for the feedback chart:
    `{"steps": [[w_step1_mb1, ...], ...], "expected": [[...], ...]}`, one row per step and one
    column per micro-batch consumed (0 where a step did not use a micro-batch), bounded to
    CHART_STEPS x CHART_MICROBATCHES and rounded. None when the steps do not line up with the
    correct loop's or an update is not a mix of micro-batch gradients (nothing to draw)."""
    windows = problem.windows
    if rec.steps != len(windows) or not consumed or consumed[0] < 1:
        return None
    shown = min(len(windows), CHART_STEPS)
    width = min(max(consumed[shown - 1], windows[shown - 1][-1] + 1), CHART_MICROBATCHES)
    columns = _columns(problem, rec, consumed[:shown])
    steps, expected = [], []
    for k in range(shown):
        count = consumed[k]
        target = rec.grads[k]
        solved = torch.linalg.lstsq(columns[:, :count], target.unsqueeze(1)).solution.squeeze(1)
        if rel(columns[:, :count] @ solved, target) > RESIDUAL:
            return None
        row = [0.0] * width
        for j, value in enumerate(solved.tolist()[:width]):
            row[j] = value
        correct = [0.0] * width
        for j, value in zip(windows[k], problem.expected_weights(windows[k]).tolist(), strict=True):
            if j < width:
                correct[j] = value
        steps.append([_round(v) for v in row])
        expected.append([_round(v) for v in correct])
    return {"steps": steps, "expected": expected}


def _round(value: float) -> float:
    if not math.isfinite(value):
        return 0.0
    return round(value, CHART_DIGITS) + 0.0  # + 0.0: no -0.0 in the JSON


def diagnose_weights(
    problem: AccumulationProblem, rec: Recording, consumed: list[int], tol: float, number: int
) -> Finding | None:
    """Solve for the weight each micro-batch got in each update and match known patterns."""
    a = problem.scenario.accum_steps
    if not consumed or consumed[-1] < 1:
        return None
    columns = _columns(problem, rec, consumed)
    for k, window in enumerate(problem.windows):
        count = consumed[k]
        target = rec.grads[k]
        if count < 1:
            return None
        weights = torch.linalg.lstsq(columns[:, :count], target.unsqueeze(1)).solution.squeeze(1)
        if rel(columns[:, :count] @ weights, target) > RESIDUAL:
            return None  # the update is not a mix of micro-batch gradients
        inside, earlier = weights[window[0] : window[-1] + 1], weights[: window[0]]
        if inside.numel() == 0:
            return None
        largest = float(inside.abs().max())
        if largest == 0.0:
            return None
        if earlier.numel() and float(earlier.abs().max()) > LEAK * largest:
            return Finding("grads_never_cleared", {"step": k + 1}, number)
        if len(window) > 1 and float(inside[:-1].abs().max()) < LEAK * largest:
            return Finding("zeroed_every_microbatch", {"accum_steps": a}, number)
        expected = problem.expected_weights(window)
        ratio = float(inside @ expected / (expected @ expected))
        if rel(inside, ratio * expected) <= SPREAD:
            if abs(ratio - 1) <= 10 * tol:
                continue  # this update is right; look at the next one
            if len(window) < a and abs(ratio - len(window) / a) <= SPREAD * ratio:
                return Finding(
                    "partial_cycle_misscaled",
                    {"leftover": len(window), "accum_steps": a},
                    number,
                )
            if a > 1 and abs(ratio - a) <= SPREAD * a:
                return Finding(
                    "loss_not_scaled", {"ratio": round(ratio, 1), "accum_steps": a}, number
                )
            return Finding(
                "wrong_loss_scale", {"ratio": float(f"{ratio:.3g}"), "accum_steps": a}, number
            )
        uniform = torch.full_like(inside, float(inside.mean()))
        if problem.tokens and rel(inside, uniform) <= SPREAD:
            return Finding("token_mean_of_means", {}, number)
        return None
    return None
