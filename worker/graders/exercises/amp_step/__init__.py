"""`mixed-precision/amp-step` with its hidden scenarios.

max_norm is set per scenario so that some steps clip (by 1.3x to 2x) and some do not, every
reference step's norm at least 5% away from the threshold (tested).
"""

from worker.graders.exercises.amp_step.grader import AmpStepGrader

AMP_STEP = [
    {"seed": 301, "batches": 8, "batch_size": 8, "inf_batch": 3, "poison": "nan",
     "lr": 0.05, "momentum": 0.9, "max_norm": 5.5},
    {"seed": 307, "batches": 6, "batch_size": 6, "inf_batch": 0, "poison": "inf",
     "lr": 0.1, "momentum": 0.0, "max_norm": 4.75},
    {"seed": 311, "batches": 10, "batch_size": 4, "inf_batch": 9, "poison": "nan",
     "lr": 0.03, "momentum": 0.5, "max_norm": 3.5},
    {"seed": 313, "batches": 5, "batch_size": 8, "inf_batch": 2, "poison": "inf",
     "lr": 0.2, "momentum": 0.8, "max_norm": 2.25},
]  # fmt: skip

EXERCISES = {"mixed-precision/amp-step": AmpStepGrader(AMP_STEP)}
