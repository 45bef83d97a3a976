"""Content loading: the real course, English fallback per locale, and file:line error reports.

The expectations are read from the YAML files themselves (with plain PyYAML), not from the
loader, so that a loader bug cannot make its own expectation.
"""

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gradlab.config import LOCALES, PROJECT_ROOT
from gradlab.content.loader import Content, lesson_view, load_content
from gradlab.content.yamlfile import ContentError, Problem

FIXTURES = Path(__file__).parent / "fixtures"
PARTIAL = FIXTURES / "partial"
REAL = PROJECT_ROOT / "lessons"
REAL_LESSON = "gradient-accumulation"
LESSONS = ["mixed-precision", "gradient-accumulation", "profiling", "gpu-memory"]


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# --- the real course ---------------------------------------------------------------------------


def test_real_course_loads_in_order(content: Content) -> None:
    course = read_yaml(REAL / "course.yaml")
    assert [lesson.id for lesson in content.course.lessons] == [
        "mixed-precision", "gradient-accumulation", "profiling", "gpu-memory",
    ]  # fmt: skip
    assert [lesson["id"] for lesson in course["lessons"]] == [
        lesson.id for lesson in content.course.lessons
    ]
    written = {p.name for p in REAL.iterdir() if (p / "lesson.yaml").is_file()}
    assert set(content.lessons) == written == set(LESSONS)
    assert len(content.exercises) >= 6
    assert REAL_LESSON in content.lessons
    assert content.lesson_number(REAL_LESSON) == 2


@pytest.mark.parametrize("lesson", LESSONS)
def test_real_exercises_have_their_starter_code(content: Content, lesson: str) -> None:
    spec = read_yaml(REAL / lesson / "lesson.yaml")
    refs = {f"{lesson}/{ex['id']}" for ex in spec["exercises"]}
    assert refs == {ref for ref in content.exercises if ref.startswith(f"{lesson}/")}
    assert len(refs) >= 1
    for ex in spec["exercises"]:
        exercise = content.exercises[f"{lesson}/{ex['id']}"]
        starter = (REAL / lesson / ex["starter"]).read_text(encoding="utf-8")
        assert exercise.starter_code == starter


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize("lesson", LESSONS)
def test_real_lesson_is_completely_translated(content: Content, lesson: str, locale: str) -> None:
    assert (REAL / lesson / f"{locale}.yaml").is_file()
    text = read_yaml(REAL / lesson / f"{locale}.yaml")
    spec = read_yaml(REAL / lesson / "lesson.yaml")
    course = read_yaml(REAL / "course.yaml")
    view = lesson_view(content, lesson, locale)

    assert view.untranslated is False
    assert view.title_untranslated is False
    assert view.title == text["title"]
    assert (view.number, view.total) == (LESSONS.index(lesson) + 1, 4)
    assert [s.spec.id for s in view.sections] == [s["id"] for s in spec["sections"]]
    assert [s.spec.id for s in view.sections if s.untranslated] == []
    for section in view.sections:
        assert section.text.title == text["sections"][section.spec.id]["title"].strip()
    assert [f.key for f in view.faq] == course["faq"]
    assert [f.key for f in view.faq if f.untranslated] == []
    for faq in view.faq:
        assert faq.text.question == text["faq"][faq.key]["question"].strip()
    assert [e.exercise.spec.id for e in view.exercises] == [e["id"] for e in spec["exercises"]]
    assert [e.exercise.ref for e in view.exercises if e.untranslated] == []
    for item in view.exercises:
        assert item.text.title == text["exercises"][item.exercise.spec.id]["title"].strip()


# --- the partial fixture: English fallback ---------------------------------------------------


@pytest.fixture(scope="module")
def partial() -> Content:
    return load_content(PARTIAL)


@pytest.fixture(scope="module")
def partial_texts() -> dict[str, Any]:
    return {
        loc: read_yaml(PARTIAL / "warmup" / f"{loc}.yaml")
        for loc in LOCALES
        if (PARTIAL / "warmup" / f"{loc}.yaml").exists()
    }


def test_partial_fixture_is_shaped_as_intended(partial: Content) -> None:
    assert not (PARTIAL / "warmup" / "es.yaml").exists()
    assert not (PARTIAL / "decay").exists()
    assert set(partial.lessons) == {"warmup"}
    assert set(partial.lessons["warmup"].texts) == {"en", "de", "tr"}
    assert [(e.id, e.number, e.available) for e in partial.lesson_list("de")] == [
        ("warmup", 1, True), ("decay", 2, False),
    ]  # fmt: skip
    starter = PARTIAL / "warmup" / "exercises" / "linear_warmup.py"
    assert partial.exercises["warmup/linear-warmup"].starter_code == starter.read_text("utf-8")


def test_partial_de_falls_back_exactly_where_missing(
    partial: Content, partial_texts: dict[str, Any]
) -> None:
    en, de = partial_texts["en"], partial_texts["de"]
    view = lesson_view(partial, "warmup", "de")

    assert view.untranslated is True
    assert view.title_untranslated is False
    assert view.title == de["title"]
    untranslated = {s.spec.id: s.untranslated for s in view.sections}
    # `schedule` has an empty body, `recap` is missing entirely
    assert untranslated == {
        "why-warmup": False, "schedule": True, "quick-check": False, "recap": True,
    }  # fmt: skip
    for section in view.sections:
        source = en if section.untranslated else de
        assert section.text.title == source["sections"][section.spec.id]["title"]
    sections = {s.spec.id: s for s in view.sections}
    assert sections["schedule"].text.body == en["sections"]["schedule"]["body"].strip()
    assert sections["recap"].text.points == en["sections"]["recap"]["points"]
    assert sections["quick-check"].text.options == de["sections"]["quick-check"]["options"]

    faq = {f.key: f for f in view.faq}
    assert [f.key for f in view.faq] == ["is-it-free", "how-long"]
    assert faq["is-it-free"].untranslated is False
    assert faq["is-it-free"].text.question == de["faq"]["is-it-free"]["question"]
    assert faq["how-long"].untranslated is True
    assert faq["how-long"].text.question == en["faq"]["how-long"]["question"]

    [exercise] = view.exercises
    assert exercise.untranslated is True
    assert exercise.text.title == en["exercises"]["linear-warmup"]["title"]
    assert exercise.text.hints == en["exercises"]["linear-warmup"]["hints"]


def test_partial_tr_is_fully_translated(partial: Content, partial_texts: dict[str, Any]) -> None:
    tr = partial_texts["tr"]
    view = lesson_view(partial, "warmup", "tr")
    assert view.untranslated is False
    assert view.title == tr["title"]
    assert not any(s.untranslated for s in view.sections)
    assert not any(f.untranslated for f in view.faq)
    assert not any(e.untranslated for e in view.exercises)
    assert [s.text.title for s in view.sections] == [
        tr["sections"][s.spec.id]["title"] for s in view.sections
    ]
    assert [f.text.question for f in view.faq] == [
        tr["faq"][key]["question"] for key in ("is-it-free", "how-long")
    ]
    assert view.exercises[0].text.title == tr["exercises"]["linear-warmup"]["title"]


def test_partial_es_without_a_file_is_entirely_english(
    partial: Content, partial_texts: dict[str, Any]
) -> None:
    en = partial_texts["en"]
    view = lesson_view(partial, "warmup", "es")
    assert view.untranslated is True
    assert view.title_untranslated is True
    assert view.title == en["title"]
    assert view.subtitle == en["subtitle"]
    assert all(s.untranslated for s in view.sections)
    assert [s.text.title for s in view.sections] == [
        en["sections"][s.spec.id]["title"] for s in view.sections
    ]
    assert len(view.faq) == 2 and all(f.untranslated for f in view.faq)
    assert all(e.untranslated for e in view.exercises)
    assert view.exercises[0].text.title == en["exercises"]["linear-warmup"]["title"]


def test_partial_en_is_the_source(partial: Content) -> None:
    assert lesson_view(partial, "warmup", "en").untranslated is False


def test_course_titles_fall_back_to_english(partial: Content) -> None:
    assert [e.title for e in partial.lesson_list("es")] == [
        "Learning-rate warm-up", "Learning-rate decay",
    ]  # fmt: skip
    assert [e.title for e in partial.lesson_list("tr")] == [
        "Öğrenme oranı ısınması", "Öğrenme oranını azaltmak",
    ]  # fmt: skip


def test_exercise_messages_fall_back_to_english(partial: Content) -> None:
    ref = "warmup/linear-warmup"

    def diagnosis(locale: str, code: str) -> str:
        return partial.exercise_message(
            exercise=ref, locale=locale, group="diagnoses", key=code, values={"warmup_steps": 5}
        )

    assert diagnosis("tr", "no_warmup").startswith("İlk 5 adım")
    assert diagnosis("de", "no_warmup").startswith("The learning rate never changes")
    assert diagnosis("de", "nope") == "nope"  # no text anywhere: the code itself


# --- error reports: file and line ------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the partial fixture."""
    return Path(shutil.copytree(PARTIAL, tmp_path / "lessons"))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} must occur once in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def line_of(path: Path, needle: str) -> int:
    """1-based number of the only line of `path` that contains `needle`."""
    found = [n for n, line in enumerate(path.read_text("utf-8").splitlines(), 1) if needle in line]
    assert len(found) == 1, f"{needle!r} is on lines {found} of {path}"
    return found[0]


def problems_of(content_dir: Path) -> list[Problem]:
    with pytest.raises(ContentError) as info:
        load_content(content_dir)
    problems = info.value.problems
    for problem in problems:  # the exception's text names every problem as file:line
        assert f"{problem.file}:{problem.line}: {problem.message}" in str(info.value)
    return problems


def only_problem(content_dir: Path) -> Problem:
    problems = problems_of(content_dir)
    assert len(problems) == 1, problems
    return problems[0]


def test_fixture_copy_loads(tree: Path) -> None:
    assert set(load_content(tree).lessons) == {"warmup"}


def test_malformed_yaml(tree: Path) -> None:
    de = tree / "warmup" / "de.yaml"
    edit(de, "    title: Warum aufwärmen?\n", "    title: Warum: aufwärmen?\n")
    problem = only_problem(tree)
    assert problem.file == de
    assert problem.line == line_of(de, "Warum: aufwärmen?")
    assert "invalid YAML" in problem.message


def test_malformed_yaml_in_course_file(tree: Path) -> None:
    course = tree / "course.yaml"
    edit(course, "      de: Abklingen der Lernrate\n", "      de: Abklingen: der Lernrate\n")
    problem = only_problem(tree)
    assert problem.file == course
    assert problem.line == line_of(course, "Abklingen: der")
    assert "invalid YAML" in problem.message


def test_unknown_key_inside_a_section(tree: Path) -> None:
    de = tree / "warmup" / "de.yaml"
    edit(
        de, "    title: Warum aufwärmen?\n", "    title: Warum aufwärmen?\n    boddy: Tippfehler\n"
    )
    problem = only_problem(tree)
    assert problem.file == de
    assert problem.line == line_of(de, "boddy:")
    assert problem.message.startswith("sections.why-warmup.boddy:")
    assert "unknown key" in problem.message


def test_unknown_key_in_lesson_spec(tree: Path) -> None:
    spec = tree / "warmup" / "lesson.yaml"
    edit(
        spec,
        "  - id: schedule\n    kind: prose\n",
        "  - id: schedule\n    kind: prose\n    cod: x\n",
    )
    problem = only_problem(tree)
    assert problem.file == spec
    assert problem.line == line_of(spec, "cod: x")
    assert problem.message.startswith("sections.1.cod:")


def test_unknown_section_id_in_locale_file(tree: Path) -> None:
    tr = tree / "warmup" / "tr.yaml"
    edit(tr, "  schedule:\n", "  shedule:\n")
    problems = problems_of(tree)
    assert Problem(tr, line_of(tr, "shedule:"), "sections.shedule: unknown id") in problems
    assert len(problems) == 1  # a locale may leave `schedule` out: only the typo is an error


def test_unknown_faq_and_exercise_ids_in_locale_file(tree: Path) -> None:
    tr = tree / "warmup" / "tr.yaml"
    edit(tr, "  how-long:\n", "  how-longg:\n")
    edit(tr, "  linear-warmup:\n", "  linear-warmupp:\n")
    problems = problems_of(tree)
    assert set(problems) == {
        Problem(tr, line_of(tr, "how-longg:"), "faq.how-longg: unknown id"),
        Problem(tr, line_of(tr, "linear-warmupp:"), "exercises.linear-warmupp: unknown id"),
    }


def test_quiz_with_wrong_number_of_options_in_locale(tree: Path) -> None:
    de = tree / "warmup" / "de.yaml"
    edit(de, "      - Die volle base_lr\n", "")
    problem = only_problem(tree)
    assert problem.file == de
    assert problem.line == line_of(de, "options:")
    assert problem.message == "sections.quick-check.options: needs 3 options, has 2"


def test_too_many_quiz_options_in_locale(tree: Path) -> None:
    tr = tree / "warmup" / "tr.yaml"
    edit(tr, "      - base_lr'nin tamamı\n", "      - base_lr'nin tamamı\n      - Hiçbiri\n")
    problem = only_problem(tree)
    assert (problem.file, problem.line) == (tr, line_of(tr, "options:"))
    assert problem.message == "sections.quick-check.options: needs 3 options, has 4"


def _drop_en_section(en: Path, section: str, following: str) -> None:
    text = en.read_text(encoding="utf-8")
    new, count = re.subn(rf"(?s)\n  {section}:\n.*?\n  {following}:\n", f"\n  {following}:\n", text)
    assert count == 1
    en.write_text(new, encoding="utf-8")


def test_missing_english_section_is_reported(tree: Path) -> None:
    en = tree / "warmup" / "en.yaml"
    _drop_en_section(en, "schedule", "quick-check")
    problem = only_problem(tree)
    assert problem.file == en
    assert problem.message.startswith("sections.schedule: ")


def test_missing_english_section_points_at_sections_line(tree: Path) -> None:
    en = tree / "warmup" / "en.yaml"
    _drop_en_section(en, "schedule", "quick-check")
    assert only_problem(tree).line == line_of(en, "sections:")


def test_incomplete_english_section_points_at_the_section(tree: Path) -> None:
    en = tree / "warmup" / "en.yaml"
    text = en.read_text(encoding="utf-8")
    start = text.index("  schedule:\n")
    end = text.index("  quick-check:\n")
    en.write_text(
        text[:start] + '  schedule:\n    title: A linear schedule\n    body: ""\n' + text[end:],
        encoding="utf-8",
    )
    problem = only_problem(tree)
    assert problem.message.startswith("sections.schedule: ")
    assert problem.line == line_of(en, "  schedule:")


def test_missing_english_file(tree: Path) -> None:
    en = tree / "warmup" / "en.yaml"
    en.unlink()
    assert only_problem(tree) == Problem(en, 1, "the English text is required")


def test_missing_english_exercise_text(tree: Path) -> None:
    en = tree / "warmup" / "en.yaml"
    text = en.read_text(encoding="utf-8")
    en.write_text(text[: text.index("exercises:\n")], encoding="utf-8")
    problem = only_problem(tree)
    assert (problem.file, problem.message) == (en, "exercises.linear-warmup: missing")


def test_a_grader_message_missing_in_english_is_an_error(tree: Path) -> None:
    """The contract (lesson.yaml `messages:`) says what the grader shows: English, the fallback
    of every locale, must have every message, or a learner would see the raw key."""
    en = tree / "warmup" / "en.yaml"
    text = en.read_text(encoding="utf-8")
    en.write_text(text[: text.index("    diagnoses:\n")], encoding="utf-8")
    problem = only_problem(tree)
    assert problem.file == en
    assert problem.message == (
        "exercises.linear-warmup.diagnoses.no_warmup: missing in English (the grader shows it)"
    )


def test_a_grader_message_with_the_wrong_placeholders_is_an_error(tree: Path) -> None:
    tr = tree / "warmup" / "tr.yaml"
    edit(tr, "İlk {warmup_steps} adım", "İlk {warmup} adım")
    problem = only_problem(tree)
    assert (problem.file, problem.message) == (
        tr,
        "exercises.linear-warmup.diagnoses.no_warmup: placeholders {warmup} differ from the "
        "contract's {warmup_steps}",
    )
    assert (
        problem.line
        == tr.read_text(encoding="utf-8")
        .splitlines()
        .index(
            next(line for line in tr.read_text(encoding="utf-8").splitlines() if "{warmup}" in line)
        )
        + 1
    )


def test_a_grader_message_outside_the_contract_is_an_error(tree: Path) -> None:
    en = tree / "warmup" / "en.yaml"
    edit(en, "    diagnoses:\n", '    diagnoses:\n      too_fast: "Slower."\n')
    problem = only_problem(tree)
    assert problem.message == (
        "exercises.linear-warmup.diagnoses.too_fast: not in the exercise's message contract "
        "(lesson.yaml messages.diagnoses)"
    )


def test_quiz_answer_out_of_range_in_lesson_spec(tree: Path) -> None:
    spec = tree / "warmup" / "lesson.yaml"
    edit(spec, "      answer: 1\n", "      answer: 3\n")
    problem = only_problem(tree)
    assert problem.file == spec
    # the validator checks the whole `quiz:` block of the third section, and names it
    assert problem.line == line_of(spec, "quiz:")
    assert problem.message.startswith("sections.2.quiz:")
    assert "answer 3 is not one of 3 options" in problem.message


def test_quiz_with_too_few_options_in_lesson_spec(tree: Path) -> None:
    spec = tree / "warmup" / "lesson.yaml"
    edit(spec, "      options: 3\n", "      options: 1\n")
    problems = problems_of(tree)
    assert Problem(spec, line_of(spec, "options: 1"), problems[0].message) in problems
    assert problems[0].message.startswith("sections.2.quiz.options:")


def test_lesson_id_must_match_its_folder(tree: Path) -> None:
    spec = tree / "warmup" / "lesson.yaml"
    edit(spec, "id: warmup\n", "id: warm-up\n")
    assert only_problem(tree) == Problem(spec, line_of(spec, "id: warm-up"), "id must be warmup")


def test_missing_starter_points_at_its_line(tree: Path) -> None:
    spec = tree / "warmup" / "lesson.yaml"
    (tree / "warmup" / "exercises" / "linear_warmup.py").unlink()
    problem = only_problem(tree)
    assert problem.file == spec
    assert problem.line == line_of(spec, "starter:")


def test_missing_starter_is_reported(tree: Path) -> None:
    spec = tree / "warmup" / "lesson.yaml"
    (tree / "warmup" / "exercises" / "linear_warmup.py").unlink()
    problem = only_problem(tree)
    assert problem.file == spec
    assert "cannot read" in problem.message and "linear_warmup.py" in problem.message


def test_every_problem_is_reported_at_once(tree: Path) -> None:
    de, tr = tree / "warmup" / "de.yaml", tree / "warmup" / "tr.yaml"
    edit(de, "  schedule:\n", "  schedul:\n")
    edit(tr, "    title: Neden ısınma?\n", "    titel: Neden ısınma?\n")
    problems = problems_of(tree)
    assert {(p.file, p.line) for p in problems} == {
        (de, line_of(de, "schedul:")), (tr, line_of(tr, "titel:")),
    }  # fmt: skip


# --- gaps in the English fallback ------------------------------------------------------------


def test_missing_subtitle_counts_as_untranslated(tree: Path) -> None:
    tr = tree / "warmup" / "tr.yaml"
    edit(tr, "subtitle: İlk güncellemeler kontrolden çıkmasın diye küçük adımlarla başla.\n", "")
    view = lesson_view(load_content(tree), "warmup", "tr")
    assert view.subtitle == read_yaml(tree / "warmup" / "en.yaml")["subtitle"]
    assert view.untranslated is True


def test_missing_quiz_explanation_falls_back_to_english(tree: Path) -> None:
    from app.routes.api import QuizAnswer, check_quiz

    de = tree / "warmup" / "de.yaml"
    text = de.read_text(encoding="utf-8")
    start, end = text.index("    explanation: |\n"), text.index("faq:\n")
    de.write_text(text[:start] + "\n" + text[end:], encoding="utf-8")
    result = check_quiz(load_content(tree), "warmup", QuizAnswer(answer=1, locale="de"))
    assert result.correct is True
    en = read_yaml(tree / "warmup" / "en.yaml")
    assert result.explanation == en["sections"]["quick-check"]["explanation"].strip()
