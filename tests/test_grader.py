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

from gradlab.config import LOCALES, Settings
from gradlab.content.loader import Content
from gradlab.results import GradeResult
from worker.grading import Runner, grade
from worker.pool import WarmPool
from worker.sandbox import run_in_sandbox

CORPUS = Path(__file__).parent / "corpus"
EXERCISES = {
    "accumulate": "gradient-accumulation/accumulate",
    "last-partial-cycle": "gradient-accumulation/last-partial-cycle",
    "token-weighted-loss": "gradient-accumulation/token-weighted-loss",
}
HEADER = re.compile(r"# expect: (passed|failed|error)(?: (\w+))?(?: line=(\d+))?")
CORPUS_FILES = sorted(CORPUS.glob("*/*.py"))

# Every code the accumulate grader can name, with the evidence it fills in.
DIAGNOSIS_EVIDENCE = {
    "loss_not_scaled": {"ratio": "4.0", "accum_steps": 4},
    "wrong_loss_scale": {"ratio": "0.25", "accum_steps": 4},
    "zeroed_every_microbatch": {"accum_steps": 4},
    "stepped_every_microbatch": {"steps": 8, "expected_steps": 2},
    "step_off_by_one": {"observed": "1, 4", "expected": 4},
    "grads_never_cleared": {"step": 2},
    "never_stepped": {"microbatches": 8},
    "microbatches_not_used": {"batch_size": 16, "micro_batch_size": 4},
    "wrong_step_count": {"steps": 3, "expected_steps": 2},
    "gradients_mismatch": {"rel_error": "0.5"},
    "parameters_mismatch": {"rel_error": "0.5"},
    "partial_cycle_dropped": {"leftover": 2},
    "partial_cycle_misscaled": {"leftover": 2, "accum_steps": 4},
    "token_mean_of_means": {},
}
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


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize("code", sorted(DIAGNOSIS_EVIDENCE))
def test_every_diagnosis_has_a_message_in_every_locale(
    content: Content, code: str, locale: str
) -> None:
    lesson = content.lessons["gradient-accumulation"]
    template = lesson.texts[locale].diagnoses.get(code)
    assert template, f"{locale}.yaml has no message for {code}"
    fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    assert fields == set(DIAGNOSIS_EVIDENCE[code]), f"{locale}/{code}: placeholders {fields}"
    template.format(**DIAGNOSIS_EVIDENCE[code])


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
