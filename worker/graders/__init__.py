"""Trusted graders, found in their folders: every package in `worker/graders/exercises/` names
the exercises it grades in `EXERCISES` ({"<lesson>/<exercise>": grader}), and its in-sandbox
twin of the same name in `worker/harness/exercises/` sets up what the learner's script gets.
Adding an exercise is adding those two folders and the lesson's YAML (docs/adding-an-exercise.md).
"""

import importlib
import pkgutil
from functools import cache

from worker.graders import exercises
from worker.graders.kit import ExerciseGrader


@cache
def graders() -> dict[str, ExerciseGrader]:
    found: dict[str, ExerciseGrader] = {}
    for info in sorted(pkgutil.iter_modules(exercises.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{exercises.__name__}.{info.name}")
        for ref, grader in module.EXERCISES.items():
            if ref in found:
                raise ValueError(f"{ref} is graded by two packages")
            grader.harness = info.name
            found[ref] = grader
    return found


def get_grader(exercise: str) -> ExerciseGrader:
    """The grader of exercise `<lesson>/<exercise>`; KeyError if none grades it."""
    return graders()[exercise]


def warm_up() -> None:
    """Pay torch's first-use costs (lazy imports, autograd, optimizers) before the first job."""
    for grader in graders().values():
        grader.warm_up()
