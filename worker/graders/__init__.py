"""Trusted graders, by the name lesson.yaml gives them (`grader:`), with their hidden scenarios.

Scenarios vary what a loop could hard-code: accum_steps (1 included), the number and size of
micro-batches, seeds, and optimizers (Adam hides a missing `/ accum_steps` in the parameters, so
gradients are compared too).
"""

from worker.graders import gpu_memory, mixed_precision, profiling
from worker.graders.base import Grader
from worker.graders.gradient_accumulation import AccumulationGrader

ACCUMULATE = [
    {"seed": 11, "accum_steps": 4, "microbatches": 8, "micro_batch_size": 4, "lr": 0.1},
    {"seed": 23, "accum_steps": 3, "microbatches": 9, "micro_batch_size": 2,
     "optimizer": "adam", "lr": 0.01},
    {"seed": 37, "accum_steps": 1, "microbatches": 3, "micro_batch_size": 5, "lr": 0.05},
    {"seed": 41, "accum_steps": 2, "microbatches": 6, "micro_batch_size": 3,
     "optimizer": "adam", "lr": 0.02},
    # Not graded: the same loop on a BatchNorm model, to show how far even a correct loop lands.
    {"seed": 53, "accum_steps": 4, "microbatches": 8, "micro_batch_size": 4, "lr": 0.1,
     "model": "mlp_bn", "informational": True},
]  # fmt: skip

LAST_PARTIAL_CYCLE = [
    {"seed": 101, "accum_steps": 4, "microbatches": 10, "micro_batch_size": 3, "lr": 0.1},
    {"seed": 103, "accum_steps": 3, "microbatches": 7, "micro_batch_size": 2,
     "optimizer": "adam", "lr": 0.01},
    {"seed": 107, "accum_steps": 3, "microbatches": 9, "micro_batch_size": 2,
     "optimizer": "adam", "lr": 0.02},
    {"seed": 109, "accum_steps": 2, "microbatches": 5, "micro_batch_size": 4, "lr": 0.05},
]  # fmt: skip

TOKEN_WEIGHTED_LOSS = [
    {"seed": 201, "accum_steps": 4, "microbatches": 8, "micro_batch_size": 3, "lr": 0.5,
     "model": "tokens", "seq_len": 6, "sparse_microbatch": 1},
    {"seed": 203, "accum_steps": 3, "microbatches": 6, "micro_batch_size": 2, "lr": 0.01,
     "optimizer": "adam", "model": "tokens", "seq_len": 8, "sparse_microbatch": 4},
    {"seed": 207, "accum_steps": 2, "microbatches": 4, "micro_batch_size": 4, "lr": 0.5,
     "model": "tokens", "seq_len": 5, "sparse_microbatch": 0},
    {"seed": 211, "accum_steps": 1, "microbatches": 3, "micro_batch_size": 3, "lr": 0.5,
     "model": "tokens", "seq_len": 6},
]  # fmt: skip

GRADERS: dict[str, Grader] = {
    "gradient_accumulation.accumulate": AccumulationGrader(ACCUMULATE),
    "gradient_accumulation.last_partial_cycle": AccumulationGrader(LAST_PARTIAL_CYCLE),
    "gradient_accumulation.token_weighted_loss": AccumulationGrader(TOKEN_WEIGHTED_LOSS),
    **mixed_precision.GRADERS,
    **profiling.GRADERS,
    **gpu_memory.GRADERS,
}


def get_grader(name: str) -> Grader:
    return GRADERS[name]


def warm_up() -> None:
    """Pay torch's first-use costs (lazy imports, optimizer set-up) before the first job."""
    from worker.graders.accumulation_problem import AccumulationProblem
    from worker.harness.problems import AccumulationScenario

    for scenarios in (ACCUMULATE, TOKEN_WEIGHTED_LOSS):
        problem = AccumulationProblem(AccumulationScenario.from_dict(scenarios[0]))
        problem.reference_run()
        problem.microbatch_gradient(problem.initial, 0)
