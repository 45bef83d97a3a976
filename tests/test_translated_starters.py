"""Translated starter code (exercises/<locale>/<file>.py): the editor opens with the starter of
the page's language, its code is the English's to the token, and a translation whose code
differs is refused at its file and line. docs/content-format.md "Translated starter code"."""

import ast
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from gradlab.config import DEFAULT_LOCALE, LOCALES, PROJECT_ROOT, Settings
from gradlab.content.loader import Content, lesson_view, load_content
from gradlab.content.starters import check_translated_starter, code_difference
from gradlab.content.yamlfile import ContentError, Problem
from tests.test_pages import get_page

REAL = PROJECT_ROOT / "lessons"
PARTIAL = Path(__file__).parent / "fixtures" / "partial"
TRANSLATED = [locale for locale in LOCALES if locale != DEFAULT_LOCALE]
# (lesson, exercise id, starter file as lesson.yaml names it), read with plain PyYAML
EXERCISES = [
    (lesson.name, spec["id"], spec["starter"])
    for lesson in sorted(REAL.iterdir())
    if (lesson / "lesson.yaml").is_file()
    for spec in yaml.safe_load((lesson / "lesson.yaml").read_text("utf-8"))["exercises"]
]


def _translation(lesson: str, starter: str, locale: str, root: Path = REAL) -> Path:
    english = root / lesson / starter
    return english.parent / locale / english.name


def _program(source: str) -> str:
    """An independent opinion on "same code": the AST without docstrings or positions."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


# --- the real course ---------------------------------------------------------------------------


def test_all_six_exercises_have_a_starter_in_every_locale(content: Content) -> None:
    assert len(EXERCISES) == 6
    for lesson, exercise_id, starter in EXERCISES:
        english = (REAL / lesson / starter).read_text("utf-8")
        exercise = content.exercises[f"{lesson}/{exercise_id}"]
        assert exercise.starter(DEFAULT_LOCALE) == exercise.starter_code == english
        for locale in TRANSLATED:
            path = _translation(lesson, starter, locale)
            translated = path.read_text("utf-8")
            assert exercise.starter(locale) == translated, path
            # translated: the opening comment ("Already defined for you: ...") is not English
            assert translated.splitlines()[0] != english.splitlines()[0], path
            assert "Already defined" not in translated and "Uncomment" not in translated, path


@pytest.mark.parametrize(("lesson", "exercise_id", "starter"), EXERCISES)
def test_translated_starters_are_the_english_program(
    lesson: str, exercise_id: str, starter: str
) -> None:
    english = (REAL / lesson / starter).read_text("utf-8")
    for locale in TRANSLATED:
        path = _translation(lesson, starter, locale)
        translated = path.read_text("utf-8")
        assert code_difference(english, translated) is None, path
        assert _program(translated) == _program(english), path
        problems = check_translated_starter(
            file=path, code=translated, english_name=starter, english_code=english
        )
        assert problems == []


@pytest.fixture(scope="module")
def real_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    from app.main import create_app

    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), content_dir=REAL,
                        secret_key="test-secret")  # fmt: skip
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.mark.parametrize("locale", LOCALES)
def test_exercise_pages_open_with_the_starter_of_their_locale(
    real_client: TestClient, locale: str
) -> None:
    """The editor's textarea (what the editor and "Reset to starter code" start from) holds the
    starter with comments and docstrings in the page's language."""
    for lesson, exercise_id, starter in EXERCISES:
        _, doc = get_page(real_client, f"/{locale}/lessons/{lesson}")
        english = REAL / lesson / starter
        path = english if locale == DEFAULT_LOCALE else _translation(lesson, starter, locale)
        textarea = doc.by_id(f"exercise-{exercise_id}").find("textarea", name="code")
        assert textarea.text == path.read_text("utf-8"), (locale, lesson, exercise_id)
        if locale != DEFAULT_LOCALE:
            assert textarea.text != english.read_text("utf-8")


# --- fallback: the partial fixture has a Turkish starter and no German one ----------------------


def test_a_locale_without_a_translated_starter_gets_the_english_one() -> None:
    partial = load_content(PARTIAL)
    exercise = partial.exercises["warmup/linear-warmup"]
    english = (PARTIAL / "warmup" / "exercises" / "linear_warmup.py").read_text("utf-8")
    turkish = (PARTIAL / "warmup" / "exercises" / "tr" / "linear_warmup.py").read_text("utf-8")
    assert not (PARTIAL / "warmup" / "exercises" / "de").exists()
    assert set(exercise.translated_starters) == {"tr"}
    assert exercise.starter("de") == exercise.starter("es") == english
    assert exercise.starter("tr") == turkish != english
    for locale, expected in (("de", english), ("tr", turkish), ("en", english)):
        view = lesson_view(partial, "warmup", locale)
        assert view.exercises[0].starter_code == expected


# --- the check: file:line of the first difference ----------------------------------------------


@pytest.fixture
def lessons(tmp_path: Path) -> Path:
    """A writable copy of the real course."""
    return Path(shutil.copytree(REAL, tmp_path / "lessons"))


def _problems(root: Path) -> list[Problem]:
    with pytest.raises(ContentError) as info:
        load_content(root)
    for problem in info.value.problems:
        assert f"{problem.file}:{problem.line}: {problem.message}" in str(info.value)
    return info.value.problems


def _line(path: Path, needle: str) -> int:
    found = [n for n, line in enumerate(path.read_text("utf-8").splitlines(), 1) if needle in line]
    assert len(found) == 1, (needle, found)
    return found[0]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text("utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_a_translated_label_is_reported_at_its_line(lessons: Path) -> None:
    """A translator who translated a string of the code: the grader would see another program
    on the German page (here a `record_function` label it looks for)."""
    german = _translation("profiling", "exercises/find-the-bottleneck.py", "de", lessons)
    _edit(german, 'with record_function("load_batch"):', 'with record_function("lade_batch"):')
    [problem] = _problems(lessons)
    assert problem.file == german
    assert problem.line == _line(german, '"lade_batch"')
    english_line = _line(REAL / "profiling/exercises/find-the-bottleneck.py", '"load_batch"')
    assert problem.message == (
        'its code differs from the English starter\'s: `"lade_batch"` here, where '
        f'exercises/find-the-bottleneck.py:{english_line} has `"load_batch"` (translate only '
        "comments and docstrings; copy the code unchanged)"
    )


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ("loss = loss_fn(model(x), y)\n", "loss = loss_fn(model(x), y) * 1\n", "* 1"),
        ("    optimizer.step()\n", "    optimizer.step()\n    optimizer.step()\n", None),
        ("    optimizer.zero_grad()\n", "", None),  # the last line, gone
        (  # the same block, indented by 2 instead of 4
            "    loss = loss_fn(model(x), y)\n    loss.backward()\n    optimizer.step()\n"
            "    optimizer.zero_grad()\n",
            "  loss = loss_fn(model(x), y)\n  loss.backward()\n  optimizer.step()\n"
            "  optimizer.zero_grad()\n",
            "  loss = loss_fn",
        ),
        ("optimizer.zero_grad()\nfor", "optimizer.zero_grad(); pass\nfor", "; pass"),
    ],
    ids=["operator", "extra-statement", "missing-statement", "indentation", "same-line"],
)
def test_any_change_of_the_code_is_an_error(
    lessons: Path, old: str, new: str, needle: str | None
) -> None:
    spanish = _translation("gradient-accumulation", "exercises/accumulate.py", "es", lessons)
    _edit(spanish, old, new)
    [problem] = _problems(lessons)
    assert problem.file == spanish
    assert "its code differs from the English starter's" in problem.message
    if needle is not None:
        assert problem.line == _line(spanish, needle)


def test_a_translation_that_is_not_python_is_reported(lessons: Path) -> None:
    turkish = _translation("gpu-memory", "exercises/fit-the-budget.py", "tr", lessons)
    _edit(turkish, "loss.backward()\n", "loss.backward(\n")
    [problem] = _problems(lessons)
    assert problem.file == turkish and problem.message.startswith("not valid Python: ")


def test_comments_and_docstrings_may_change_freely(lessons: Path) -> None:
    """Longer comments, rewrapped docstrings, blank lines: the same program, accepted; line
    numbers need not match the English."""
    german = _translation("profiling", "exercises/find-the-bottleneck.py", "de", lessons)
    text = german.read_text("utf-8")
    _edit(german, '    """Batch Nr. `step`:', '    """\n    Batch Nr. `step`\n\n    ist:')
    _edit(german, "history = []\n", "# eine Zeile mehr\n\nhistory = []  # Verlauf\n")
    _edit(german, "BOTTLENECK = None  # das Label", "BOTTLENECK = None  # (noch leer) das Label")
    assert german.read_text("utf-8") != text
    exercise = load_content(lessons).exercises["profiling/find-the-bottleneck"]
    assert exercise.starter("de") == german.read_text("utf-8")


def test_a_docstring_is_not_a_place_for_code(lessons: Path) -> None:
    """Only a docstring's text is free: a statement after it on its line is code."""
    german = _translation("profiling", "exercises/find-the-bottleneck.py", "de", lessons)
    _edit(german, 'normalisiert."""\n', 'normalisiert."""; batch_size = 1\n')
    [problem] = _problems(lessons)
    assert problem.line == _line(german, "; batch_size = 1")
    assert "`;` here" in problem.message


def test_a_file_that_translates_no_starter_is_an_error(lessons: Path) -> None:
    stray = lessons / "gradient-accumulation" / "exercises" / "de" / "accumulation.py"
    stray.write_text("# Tippfehler im Dateinamen\n", encoding="utf-8")
    [problem] = _problems(lessons)
    assert (problem.file, problem.line) == (stray, 1)
    assert "translates no exercise's starter" in problem.message


def test_deleting_a_translation_falls_back_to_english(lessons: Path) -> None:
    _translation("mixed-precision", "exercises/amp-step.py", "tr", lessons).unlink()
    exercise = load_content(lessons).exercises["mixed-precision/amp-step"]
    english = (lessons / "mixed-precision" / "exercises" / "amp-step.py").read_text("utf-8")
    assert exercise.starter("tr") == english and exercise.starter("de") != english


# --- the grader sees the same program ------------------------------------------------------------

BOTTLENECK_EXERCISE = "profiling/find-the-bottleneck"


def _verdict(content: Content, code: str) -> tuple[str | None, list[str]]:
    from tests.inprocess import judge

    judgement = judge(BOTTLENECK_EXERCISE, code, content)
    code_ = judgement.diagnosis.code if judgement.diagnosis else None
    return code_, sorted(c.id for c in judgement.checks if c.passed)


@pytest.fixture(scope="module")
def english_verdict(content: Content) -> tuple[str | None, list[str]]:
    verdict = _verdict(content, content.exercises[BOTTLENECK_EXERCISE].starter_code)
    assert verdict[0] == "bottleneck_not_named"  # as the corpus's starter_unchanged.py
    return verdict


@pytest.mark.parametrize("locale", TRANSLATED)
def test_an_unchanged_translated_starter_is_judged_like_the_english_one(
    content: Content, english_verdict: tuple[str | None, list[str]], locale: str
) -> None:
    """The profiling starter has a docstring, a commented constant and a commented-out
    snippet: submitted unchanged in any language, it gets the English starter's verdict."""
    code = content.exercises[BOTTLENECK_EXERCISE].starter(locale)
    assert code != content.exercises[BOTTLENECK_EXERCISE].starter_code
    assert _verdict(content, code) == english_verdict
