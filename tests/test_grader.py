"""Learner submissions graded through the real sandbox, each with its expected verdict, and the
message contracts that tie graders, lesson files and corpus together.

Every file in tests/corpus/<exercise>/ starts with a header line:
    # expect: passed | failed <diagnosis_code> | error <error_kind> [line=N]
Files named cheat_*.py are deliberate cheats: each must fail.
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
from worker.graders import graders
from worker.grading import Runner, grade
from worker.harness.run import exercise_names
from worker.pool import WarmPool, run_in_sandbox

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


def _headers() -> list[tuple[str, str, str | None, str | None]]:
    found = []
    for path in CORPUS_FILES:
        match = HEADER.match(path.read_text().splitlines()[0])
        assert match, path
        found.append((path.parent.name, *match.groups()))
    return found


def test_corpus_covers_the_required_verdicts() -> None:
    """At least 40 submissions; every diagnosis code the starting contract named, from two
    different buggy loops; correct loops in several forms for every exercise."""
    headers = _headers()
    assert len(headers) >= 40
    for code in DESIGN_CODES:
        assert sum(detail == code for _, _, detail, _ in headers) >= 2, code
    for exercise in EXERCISES:
        assert sum(ex == exercise and st == "passed" for ex, st, _, _ in headers) >= 3, exercise
    assert {"syntax_error", "runtime_error", "timeout"} <= {
        detail for _, status, detail, _ in headers if status == "error"
    }


def test_every_exercise_has_cheats_and_none_of_them_passes() -> None:
    """The cheat corpus: for every exercise at least six deliberate cheats, each expected to
    fail, or to end in an error where it broke the grader's records (test_corpus_verdict grades
    them)."""
    for exercise in EXERCISES:
        cheats = sorted((CORPUS / exercise).glob("cheat_*.py"))
        assert len(cheats) >= 6, exercise
        for path in cheats:
            match = HEADER.match(path.read_text().splitlines()[0])
            assert match and match.group(1) in ("failed", "error"), path


def test_every_declared_diagnosis_is_given_by_some_corpus_file(content: Content) -> None:
    """Each exercise's message contract (lesson.yaml) declares the diagnoses its grader gives;
    the corpus shows every one of them being given, so none is dead and none is missing (a
    grader giving an undeclared one fails its corpus file with an internal error)."""
    given = {(ex, detail) for ex, status, detail, _ in _headers() if status == "failed"}
    for ref, exercise in content.exercises.items():
        folder = ref.split("/")[1]
        for code in exercise.spec.messages.diagnoses:
            assert (folder, code) in given, f"{ref}: no corpus file is diagnosed {code}"


def test_graders_and_harnesses_are_found_by_their_folders(content: Content) -> None:
    """Every exercise of the course has a trusted grader, every grader an exercise, and each
    grader's in-sandbox twin exists under the same name."""
    assert set(graders()) == set(content.exercises)
    for ref, grader in graders().items():
        assert grader.harness in exercise_names(), ref


def _contract_texts() -> list[tuple[str, str, frozenset[str]]]:
    content = load_content(PROJECT_ROOT / "lessons")
    return [
        (ref, f"{group}.{key}", frozenset(fields))
        for ref, exercise in sorted(content.exercises.items())
        for group in ("checks", "diagnoses")
        for key, fields in sorted(getattr(exercise.spec.messages, group).items())
    ]


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize(("exercise", "key", "fields"), _contract_texts(), ids=lambda v: str(v))
def test_every_contract_text_exists_in_every_locale(
    content: Content, exercise: str, key: str, fields: frozenset[str], locale: str
) -> None:
    """Each text an exercise's contract declares is there, in every locale, with exactly its
    placeholders (so no learner ever sees a raw key or an English line on a translated page)."""
    group, name = key.split(".", 1)
    definition = content.exercises[exercise]
    texts = content.lessons[definition.lesson].texts[locale].exercises[definition.spec.id]
    template = getattr(texts, group).get(name)
    assert template, f"{definition.lesson}/{locale}.yaml has no {exercise} {key}"
    found = {field for _, field, _, _ in string.Formatter().parse(template) if field}
    assert found == fields, f"{locale}/{key}: placeholders {found}, expected {set(fields)}"
    template.format(**dict.fromkeys(fields, 1))


def test_every_design_code_has_a_grader_text(content: Content) -> None:
    declared = {
        code
        for ref, exercise in content.exercises.items()
        if ref.startswith("gradient-accumulation/")
        for code in exercise.spec.messages.diagnoses
    }
    assert declared >= DESIGN_CODES


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
    assert "batchnorm_note" not in {c.id for c in result.checks}  # a note, not a check
    note = next(n for n in result.notes if n.id == "batchnorm_note")
    assert "BatchNorm" in note.message and note.i18n is not None
    percent = int(re.search(r"(\d+) %", note.message).group(1))
    assert 20 <= percent <= 200  # a correct loop is far from the full batch on BatchNorm
