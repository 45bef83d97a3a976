"""Learner submissions graded through the real sandbox, each with its expected verdict.

Every file in tests/corpus/<exercise>/ starts with a header line:
    # expect: passed | failed <diagnosis_code> | error <error_kind> [line=N]
"""

import re
import string
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradlab.config import LOCALES, PROJECT_ROOT, Settings
from gradlab.content.loader import Content, load_content
from gradlab.results import GradeResult
from worker.graders import get_grader
from worker.grading import Runner, grade
from worker.pool import WarmPool
from worker.sandbox import run_in_sandbox

CORPUS = Path(__file__).parent / "corpus"
# tests/corpus/<exercise id>/ holds the submissions for the exercise of that id.
EXERCISES = {
    starter.stem: f"{starter.parent.parent.name}/{starter.stem}"
    for starter in (PROJECT_ROOT / "lessons").glob("*/exercises/*.py")
}
HEADER = re.compile(r"# expect: (passed|failed|error)(?: (\w+))?(?: line=(\d+))?")
CORPUS_FILES = sorted(CORPUS.glob("*/*.py"))
DESIGN_CODES = {
    "loss_not_scaled",
    "wrong_loss_scale",
    "zeroed_every_microbatch",
    "stepped_every_microbatch",
    "step_off_by_one",
    "grads_never_cleared",
    "never_stepped",
    "microbatches_not_used",
    "partial_cycle_dropped",
    "partial_cycle_misscaled",
    "token_mean_of_means",
}


@pytest.fixture(scope="module")
def grading_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(data_dir=tmp_path_factory.mktemp("data"), max_wall_s=15)


@pytest.fixture(scope="module")
def pool(grading_settings: Settings) -> Iterator[WarmPool]:
    """The corpus runs through the warm pool, as the worker runs it (the cold path is covered
    by the sandbox and CLI tests)."""
    warm = WarmPool(grading_settings, slots=1, use_gpu=grading_settings.device == "cuda")
    yield warm
    warm.close()


def _assert_verdict(
    path: Path, settings: Settings, content: Content, runner: Runner = run_in_sandbox
) -> GradeResult:
    code = path.read_text(encoding="utf-8")
    match = HEADER.match(code.splitlines()[0])
    assert match, f"{path}: first line must be '# expect: ...'"
    status, detail, line = match.groups()
    result = grade(
        content=content,
        settings=settings,
        exercise=EXERCISES[path.parent.name],
        code=code,
        locale="en",
        runner=runner,
    )
    summary = f"{result.status} {result.error} {result.diagnosis} {result.output.stderr[-2000:]}"
    assert result.status == status, summary
    if status == "passed":
        assert result.score == 1.0 and result.diagnosis is None and result.error is None
        assert all(check.passed for check in result.checks)
    elif status == "failed":
        assert result.diagnosis is not None and result.diagnosis.code == detail, summary
        assert 0.0 <= result.score < 1.0
        assert result.diagnosis.message and "{" not in result.diagnosis.message
    else:
        assert result.error is not None and result.error.kind == detail, summary
        if line:
            assert result.error.line == int(line)
    return result


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_corpus_verdict(
    path: Path, grading_settings: Settings, content: Content, pool: WarmPool
) -> None:
    result = _assert_verdict(path, grading_settings, content, pool.run)
    assert result.device == "cpu" or grading_settings.device != "cpu"


@pytest.mark.gpu
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_corpus_verdict_on_cuda(path: Path, tmp_path: Path, content: Content) -> None:
    """The same corpus through the CUDA path (float32, TF32 off): run with `pytest -m gpu`."""
    settings = Settings(data_dir=tmp_path, device="cuda", max_wall_s=30)
    result = _assert_verdict(path, settings, content)
    assert result.device == "cuda"


def test_corpus_covers_the_required_verdicts() -> None:
    """At least 40 submissions; every diagnosis code of DESIGN.md from two different buggy
    loops; correct loops in several forms for every exercise."""
    headers = [
        (p.parent.name, *HEADER.match(p.read_text().splitlines()[0]).groups()) for p in CORPUS_FILES
    ]
    assert len(headers) >= 40
    for code in DESIGN_CODES:
        assert sum(detail == code for _, _, detail, _ in headers) >= 2, code
    for exercise in EXERCISES:
        assert sum(ex == exercise and st == "passed" for ex, st, _, _ in headers) >= 3, exercise
    assert {"syntax_error", "runtime_error", "timeout"} <= {
        detail for _, status, detail, _ in headers if status == "error"
    }


def _grader_texts() -> list[tuple[str, str, frozenset[str]]]:
    content = load_content(PROJECT_ROOT / "lessons")
    return [
        (ref, key, fields)
        for ref, exercise in sorted(content.exercises.items())
        for key, fields in sorted(get_grader(exercise.spec.grader).messages.items())
    ]


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize(("exercise", "key", "fields"), _grader_texts(), ids=lambda v: str(v))
def test_every_grader_text_exists_in_every_locale(
    content: Content, exercise: str, key: str, fields: frozenset[str], locale: str
) -> None:
    """Each text a grader takes from the lesson files is there, in every locale, with exactly
    the placeholders the grader fills in."""
    group, name = key.split(".", 1)
    lesson = content.lessons[content.exercises[exercise].lesson]
    template = getattr(lesson.texts[locale], group).get(name)
    assert template, f"{lesson.spec.id}/{locale}.yaml has no {key}"
    found = {field for _, field, _, _ in string.Formatter().parse(template) if field}
    assert found == fields, f"{locale}/{key}: placeholders {found}, expected {set(fields)}"
    template.format(**dict.fromkeys(fields, 1))


def test_every_design_code_has_a_grader_text() -> None:
    texts = get_grader("gradient_accumulation.accumulate").messages
    assert {f"diagnoses.{code}" for code in DESIGN_CODES} <= set(texts)


def test_runtime_error_shows_only_the_learners_frames(
    grading_settings: Settings, content: Content
) -> None:
    code = textwrap.dedent(
        """
        def train():
            for x, y in loader:
                out = model(x[:, :3])
                loss_fn(out, y).backward()

        train()
        """
    )
    result = grade(
        content=content,
        settings=grading_settings,
        exercise=EXERCISES["accumulate"],
        code=code,
        locale="de",
    )
    assert result.status == "error" and result.error.kind == "runtime_error"
    assert result.error.line == 4  # model(x[:, :3]): the learner's deepest line
    message = result.error.message
    assert 'File "submission.py", line 7, in <module>' in message
    assert 'File "submission.py", line 4, in train' in message
    assert "RuntimeError" in message and "mat1 and mat2" in message
    assert "/gradlab" not in message and "torch/" not in message


def test_a_correct_loop_learns_how_far_batchnorm_lands(
    grading_settings: Settings, content: Content
) -> None:
    correct = (CORPUS / "accumulate" / "canonical.py").read_text()
    result = grade(
        content=content,
        settings=grading_settings,
        exercise=EXERCISES["accumulate"],
        code=correct,
        locale="es",
    )
    assert result.status == "passed" and result.score == 1.0
    note = next(c for c in result.checks if c.id == "batchnorm_note")
    assert note.max_points == 0 and "BatchNorm" in note.message
    percent = int(re.search(r"(\d+) %", note.message).group(1))
    assert 20 <= percent <= 200  # a correct loop is far from the full batch on BatchNorm
