"""The gradient-accumulation exercises of lesson 2, one grader each, with their hidden scenarios.

Scenarios vary what a loop could hard-code: accum_steps (1 included), the number and size of
micro-batches, seeds, and optimizers (Adam hides a missing `/ accum_steps` in the parameters, so
gradients are compared too). Each exercise has a memory witness (`width` > 0): its window of 8
micro-batches holds megabytes of activations, so the kernel's peak tells one micro-batch at a
time from a window held at once (grader.py).
"""

from worker.graders.exercises.accumulation.grader import AccumulationGrader

ACCUMULATE = [
    {"seed": 11, "accum_steps": 4, "microbatches": 8, "micro_batch_size": 4, "lr": 0.1},
    {"seed": 23, "accum_steps": 3, "microbatches": 9, "micro_batch_size": 2,
     "optimizer": "adam", "lr": 0.01},
    {"seed": 37, "accum_steps": 1, "microbatches": 3, "micro_batch_size": 5, "lr": 0.05},
    {"seed": 43, "accum_steps": 8, "microbatches": 8, "micro_batch_size": 512, "width": 256,
     "lr": 0.05},
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
    {"seed": 113, "accum_steps": 8, "microbatches": 10, "micro_batch_size": 512, "width": 256,
     "lr": 0.05},
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
    {"seed": 213, "accum_steps": 8, "microbatches": 8, "micro_batch_size": 16, "lr": 0.5,
     "model": "tokens", "seq_len": 64, "width": 128, "sparse_microbatch": 2},
]  # fmt: skip

EXERCISES = {
    "gradient-accumulation/accumulate": AccumulationGrader(ACCUMULATE),
    "gradient-accumulation/last-partial-cycle": AccumulationGrader(LAST_PARTIAL_CYCLE),
    "gradient-accumulation/token-weighted-loss": AccumulationGrader(TOKEN_WEIGHTED_LOSS),
}
