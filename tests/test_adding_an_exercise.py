"""docs/adding-an-exercise.md, followed to the letter: a toy exercise made of its two folders and
its lesson files, and nothing else, is found, run in the real sandbox and graded."""

import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradlab.config import Settings
from gradlab.content.loader import load_content
from worker import graders as grader_registry
from worker import sandbox
from worker.graders import exercises as trusted_exercises
from worker.grading import grade
from worker.pool import WarmPool

IN_SANDBOX = '''
"""`toy/square`: the learner squares `x`; the recorder sends back what `y` holds."""

import torch

from ...recorder import Recorder, flat


def make_x(scenario):
    generator = torch.Generator().manual_seed(scenario["seed"])
    return torch.randn(scenario["size"], generator=generator, dtype=torch.float64)


class SquareRecorder(Recorder):
    def __init__(self):
        self.y = torch.zeros(0, dtype=torch.float64)

    def after_script(self, names):
        y = names.get("y")
        if isinstance(y, torch.Tensor):
            self.y = flat([y])

    def observations(self, prefix):
        return {f"{prefix}.y": self.y}, {}


def setup(scenario, ctx):
    return {"x": make_x(scenario).to(ctx.dtype), "torch": torch}, SquareRecorder()


TRUSTED_PHASES = {}
'''

TRUSTED = '''
"""`toy/square`, graded: y must be x squared, x rebuilt here from the scenario's seed."""

from worker.graders.kit import (
    ExerciseGrader, Finding, Judgement, first, make_check, rel, runs_check,
)
from worker.harness.exercises.square import make_x


class SquareGrader(ExerciseGrader):
    def judge(self, run, texts):
        errors = []
        for record in run.records():
            y = record.observations.tensor(f"s{record.index}.y", dims=1)
            expected = make_x(record.spec) ** 2
            errors.append(rel(y, expected) if y.shape == expected.shape else float("inf"))
        bad = first(errors, lambda e: e > 1e-9)
        check = make_check(
            "result",
            passed=bad is None,
            points=1.0,
            message=texts.check("result.ok" if bad is None else "result.bad"),
        )
        finding = None if bad is None else Finding("not_squared", {"error": bad})
        return Judgement(
            checks=[runs_check(texts), check],
            diagnosis=texts.diagnosis(finding) if finding else None,
        )


EXERCISES = {"toy/square": SquareGrader([{"seed": 1, "size": 4}, {"seed": 2, "size": 7}])}
'''

COURSE = """
id: toys
title: {en: Toys}
lessons:
  - id: toy
    title: {en: A toy}
"""

LESSON = """
id: toy
sections:
  - id: only
exercises:
  - id: square
    starter: exercises/square.py
    device: cpu
    limits: {wall_s: 30, memory_mb: 1024}
    messages:
      checks:
        result.ok: []
        result.bad: []
      diagnoses:
        not_squared: [error]
"""

ENGLISH = """
title: A toy
sections:
  only:
    title: Only
    body: Square it.
exercises:
  square:
    title: Square x
    instructions: Set `y` to `x` squared.
    diagnoses:
      not_squared: "y is off by {error} (relative): square x."
    checks:
      result.ok: "y is x squared."
      result.bad: "y is not x squared."
"""


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Settings, Path]]:
    # 1. the in-sandbox folder, in a copy of the harness the sandbox binds
    harness = Path(shutil.copytree(sandbox.HARNESS_DIR, tmp_path / "harness"))
    (harness / "exercises" / "square").mkdir()
    (harness / "exercises" / "square" / "__init__.py").write_text(textwrap.dedent(IN_SANDBOX))
    monkeypatch.setattr(sandbox, "HARNESS_DIR", harness)
    # 2. the trusted folder, as a package of worker.graders.exercises
    trusted = tmp_path / "trusted"
    (trusted / "square").mkdir(parents=True)
    (trusted / "square" / "__init__.py").write_text(textwrap.dedent(TRUSTED))
    monkeypatch.setattr(trusted_exercises, "__path__", [*trusted_exercises.__path__, str(trusted)])
    # the trusted side imports the problem from the in-sandbox folder, as real exercises do
    import worker.harness.exercises as harness_exercises

    monkeypatch.setattr(
        harness_exercises, "__path__", [*harness_exercises.__path__, str(harness / "exercises")]
    )
    grader_registry.graders.cache_clear()
    # 3. the lesson's files
    lessons = tmp_path / "lessons"
    (lessons / "toy" / "exercises").mkdir(parents=True)
    (lessons / "course.yaml").write_text(COURSE)
    (lessons / "toy" / "lesson.yaml").write_text(LESSON)
    (lessons / "toy" / "en.yaml").write_text(ENGLISH)
    (lessons / "toy" / "exercises" / "square.py").write_text("y = x\n")
    yield Settings(data_dir=tmp_path / "data", content_dir=lessons), lessons
    grader_registry.graders.cache_clear()


def test_a_toy_exercise_is_graded_by_its_folders_alone(toy: tuple[Settings, Path]) -> None:
    settings, lessons = toy
    content = load_content(lessons)
    assert "toy/square" in grader_registry.graders()
    pool = WarmPool(settings, slots=1)
    try:

        def run(code: str):  # type: ignore[no-untyped-def]
            return grade(
                content=content, settings=settings, exercise="toy/square", code=code,
                locale="de", runner=pool.run,
            )  # fmt: skip

        passed = run("y = x ** 2\n")
        assert passed.status == "passed", passed
        failed = run("y = x * 3\n")
        assert failed.status == "failed" and failed.diagnosis.code == "not_squared"
        assert "off by" in failed.diagnosis.message  # English fallback for German
        assert run("y = \n").error.kind == "syntax_error"
    finally:
        pool.close()
