"""`gpu-memory/fit-the-budget` with its hidden scenarios (seeds, example counts, optimizers,
budgets); 3203 is prime: no chunk count divides it.

Sizes and budgets (bench/RESULTS.md "fit-the-budget peaks"): the plain step costs 13-17 MiB
above the set-up, so the kernel's peak, which moves by up to ~0.5 MiB between identical runs
(the memory controller charges pages in per-CPU batches), reads each ratio to about 1-5%. The
usual fixes land at 0.24-0.53 (micro-batches) and 0.60-0.72 (checkpointing in 2 to 8
segments); the plain step at 1.00 and one checkpoint around the whole model at 1.07-1.10. The
budget, 0.85, sits at least 0.13 away from both.
"""

from worker.graders.exercises.fit_the_budget.grader import FitTheBudgetGrader

SCENARIOS = [
    {"seed": 401, "examples": 3200, "budget": 0.85, "optimizer": "sgd", "lr": 0.05},
    {"seed": 409, "examples": 3203, "budget": 0.85, "optimizer": "adam", "lr": 0.01},
    {"seed": 419, "examples": 3600, "budget": 0.85, "optimizer": "sgd", "lr": 0.05},
]

EXERCISES = {"gpu-memory/fit-the-budget": FitTheBudgetGrader(SCENARIOS)}
