"""Trusted graders, by the name lesson.yaml gives them (`grader:`)."""

from worker.graders.base import Grader
from worker.graders.gradient_accumulation import AccumulateGrader

GRADERS: dict[str, Grader] = {
    "gradient_accumulation.accumulate": AccumulateGrader(),
}


def get_grader(name: str) -> Grader:
    return GRADERS[name]
