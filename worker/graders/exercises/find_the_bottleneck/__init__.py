"""`profiling/find-the-bottleneck` with its hidden scenarios: dataset and batch sizes, seeds and
optimizers a script could hard-code. The second wraps around the end of its dataset (18 x 48 >
800), so a batch taken as a plain slice comes out short and is caught.
"""

from worker.graders.exercises.find_the_bottleneck.grader import BottleneckGrader

SCENARIOS = [
    {"seed": 3, "examples": 2048, "features": 24, "batch_size": 32, "steps": 8,
     "optimizer": "sgd", "lr": 0.1},
    {"seed": 5, "examples": 800, "features": 24, "batch_size": 48, "steps": 18,
     "optimizer": "momentum", "lr": 0.05},
    {"seed": 7, "examples": 1024, "features": 32, "batch_size": 64, "steps": 8,
     "optimizer": "adam", "lr": 0.01},
]  # fmt: skip

EXERCISES = {"profiling/find-the-bottleneck": BottleneckGrader(SCENARIOS)}
