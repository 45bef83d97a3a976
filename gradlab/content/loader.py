"""Load the course from `lessons/` and build per-locale views with English fallback."""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from babel.numbers import format_decimal, format_scientific

from gradlab.config import DEFAULT_LOCALE, LOCALES
from gradlab.content.consistency import check_locale, placeholders
from gradlab.content.schema import (
    Course,
    ExerciseSpec,
    ExerciseText,
    FaqText,
    LessonSpec,
    LessonText,
    SectionSpec,
    SectionText,
)
from gradlab.content.starters import (
    check_translated_starter,
    stray_translations,
    translated_path,
)
from gradlab.content.yamlfile import ContentError, Path_, Problem, line_of, load_yaml


@dataclass(frozen=True)
class Exercise:
    """An exercise as the worker and the web need it: `<lesson>/<exercise>`."""

    lesson: str
    spec: ExerciseSpec
    starter_code: str  # English
    # per locale that has one: the starter with translated comments and docstrings, same code
    translated_starters: Mapping[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"{self.lesson}/{self.spec.id}"

    def starter(self, locale: str) -> str:
        """The starter code a page in `locale` puts in the editor: its translation where the
        lesson has one (exercises/<locale>/<file>.py), else the English."""
        return self.translated_starters.get(locale, self.starter_code)


@dataclass(frozen=True)
class Lesson:
    spec: LessonSpec
    texts: dict[str, LessonText]  # per locale; "en" always present
    starter_code: dict[str, str]  # per exercise id
    translated_starters: dict[str, dict[str, str]] = field(default_factory=dict)  # id -> locale
    files: dict[str, Path] = field(default_factory=dict)  # per locale present
    lines: dict[str, dict[Path_, int]] = field(default_factory=dict)  # per locale: key -> line


@dataclass(frozen=True)
class LessonEntry:
    id: str
    number: int
    title: str
    available: bool  # False: listed in the course, page not written yet


@dataclass(frozen=True)
class Content:
    course: Course
    lessons: dict[str, Lesson]  # only lessons that have a folder
    exercises: dict[str, Exercise] = field(default_factory=dict)
    content_dir: Path | None = None

    def lesson_list(self, locale: str) -> list["LessonEntry"]:
        """The course's lessons in order, titled in `locale` (English where missing)."""
        return [
            LessonEntry(
                id=entry.id,
                number=number,
                title=entry.title.get(locale) or entry.title[DEFAULT_LOCALE],
                available=entry.id in self.lessons,
            )
            for number, entry in enumerate(self.course.lessons, start=1)
        ]

    def lesson_number(self, lesson_id: str) -> int:
        return [entry.id for entry in self.course.lessons].index(lesson_id) + 1

    def exercise_template(
        self, *, exercise: str, locale: str, group: Literal["diagnoses", "checks"], key: str
    ) -> str | None:
        """An exercise's message template (a diagnosis or a check) written by the lesson's
        authors, in `locale` or else in English; None for an exercise or key it does not have."""
        definition = self.exercises.get(exercise)
        lesson = self.lessons.get(definition.lesson) if definition is not None else None
        if definition is None or lesson is None:
            return None
        for candidate in (locale, DEFAULT_LOCALE):
            text = lesson.texts.get(candidate)
            found = text.exercises.get(definition.spec.id) if text is not None else None
            if found is not None and getattr(found, group).get(key):
                return getattr(found, group)[key]
        return None

    def exercise_message(
        self,
        *,
        exercise: str,
        locale: str,
        group: Literal["diagnoses", "checks"],
        key: str,
        values: Mapping[str, object] | None = None,
    ) -> str:
        """An exercise's message (`exercise_template`) with `values` filled in (floats in the
        locale's number format). The message contract (`gradlab lessons check`) keeps keys and
        placeholders right; should one still be wrong, the template (or the key) is shown
        rather than grading failing."""
        template = self.exercise_template(exercise=exercise, locale=locale, group=group, key=key)
        if template is None:
            return key
        localized = {
            name: format_number(value, locale) if isinstance(value, float) else value
            for name, value in (values or {}).items()
        }
        try:
            return template.format(**localized)
        except (KeyError, IndexError, ValueError):
            return template


def format_number(value: float, locale: str) -> str:
    """Two significant digits in the locale's format ("4.0", "4,0", "0.0065"), three when that
    writes the number exactly (a setting such as max_norm 4.75 is never shown rounded); very
    small numbers in scientific notation ("3.2E-7"); "∞" for what is not finite."""
    if not math.isfinite(value):
        return "∞"
    if value != 0 and abs(value) < 1e-3:
        return format_scientific(value, format="#.#E0", locale=locale)
    exact = float(f"{value:.3g}") == value
    return format_decimal(value, format="@@#" if exact else "@@", locale=locale)


def load_content(content_dir: Path) -> Content:
    """Read and validate everything; raise ContentError listing every problem found."""
    problems: list[Problem] = []
    course, _ = load_yaml(content_dir / "course.yaml", Course)
    lessons: dict[str, Lesson] = {}
    exercises: dict[str, Exercise] = {}
    for entry in course.lessons:
        folder = content_dir / entry.id
        if not folder.is_dir():
            continue  # listed in the course, page not written yet
        try:
            lesson = _load_lesson(folder, entry.id, course)
        except ContentError as exc:
            problems.extend(exc.problems)
            continue
        lessons[entry.id] = lesson
        for spec in lesson.spec.exercises:
            exercise = Exercise(
                entry.id,
                spec,
                lesson.starter_code[spec.id],
                lesson.translated_starters.get(spec.id, {}),
            )
            exercises[exercise.ref] = exercise
    if problems:
        raise ContentError(problems)
    return Content(course=course, lessons=lessons, exercises=exercises, content_dir=content_dir)


def _load_lesson(folder: Path, lesson_id: str, course: Course) -> Lesson:
    spec_file = folder / "lesson.yaml"
    spec, spec_lines = load_yaml(spec_file, LessonSpec)
    problems: list[Problem] = []
    if spec.id != lesson_id:
        problems.append(Problem(spec_file, spec_lines.get(("id",), 1), f"id must be {lesson_id}"))
    starter_code: dict[str, str] = {}
    for index, exercise in enumerate(spec.exercises):
        try:
            starter_code[exercise.id] = (folder / exercise.starter).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            line = line_of(spec_lines, ("exercises", index, "starter"))
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            problems.append(
                Problem(
                    spec_file,
                    line,
                    f"exercises.{index}.starter: cannot read {exercise.starter}: {reason}",
                )
            )
    translated_starters, starter_problems = _translated_starters(folder, spec, starter_code)
    problems.extend(starter_problems)
    texts: dict[str, LessonText] = {}
    files: dict[str, Path] = {}
    line_maps: dict[str, dict[Path_, int]] = {}
    for locale in LOCALES:  # English first: the others are checked against it
        file = folder / f"{locale}.yaml"
        if not file.exists():
            if locale == DEFAULT_LOCALE:
                problems.append(Problem(file, 1, "the English text is required"))
            continue
        try:
            text, lines = load_yaml(file, LessonText)
        except ContentError as exc:
            problems.extend(exc.problems)
            continue
        problems.extend(_check_keys(file, lines, spec, text, course))
        problems.extend(_check_messages(file, lines, spec, text, locale))
        if locale == DEFAULT_LOCALE:
            problems.extend(_check_english_complete(file, lines, spec, text, course))
        english = texts.get(DEFAULT_LOCALE)
        if english is not None or locale == DEFAULT_LOCALE:
            problems.extend(
                check_locale(
                    file=file, lines=lines, text=text, locale=locale, english=english or text
                )
            )
        texts[locale], files[locale], line_maps[locale] = text, file, lines
    if problems:
        raise ContentError(problems)
    return Lesson(
        spec=spec,
        texts=texts,
        starter_code=starter_code,
        translated_starters=translated_starters,
        files=files,
        lines=line_maps,
    )


def _translated_starters(
    folder: Path, spec: LessonSpec, english: dict[str, str]
) -> tuple[dict[str, dict[str, str]], list[Problem]]:
    """Each exercise's translated starters (exercises/<locale>/<file>.py, found by name), each
    checked to be the English program with only its comments and docstrings translated."""
    found: dict[str, dict[str, str]] = {}
    problems = stray_translations(folder, [exercise.starter for exercise in spec.exercises])
    for exercise in spec.exercises:
        if exercise.id not in english:
            continue  # reported above: the English starter cannot be read
        for locale in LOCALES:
            path = translated_path(folder, exercise.starter, locale)
            if locale == DEFAULT_LOCALE or not path.is_file():
                continue
            try:
                code = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
                problems.append(Problem(path, 1, f"cannot read: {reason}"))
                continue
            problems_here = check_translated_starter(
                file=path,
                code=code,
                english_name=exercise.starter,
                english_code=english[exercise.id],
            )
            problems.extend(problems_here)
            if not problems_here:
                found.setdefault(exercise.id, {})[locale] = code
    return found, problems


def _check_keys(
    file: Path, lines: dict, spec: LessonSpec, text: LessonText, course: Course
) -> list[Problem]:
    """Keys of a locale file must exist in the neutral file (a typo is an error, not a gap)."""
    known = {
        "sections": {s.id for s in spec.sections},
        "exercises": {e.id for e in spec.exercises},
        "faq": set(course.faq),
    }
    problems = []
    for group, allowed in known.items():
        for key in getattr(text, group):
            if key not in allowed:
                line = lines.get((group, key), 1)
                problems.append(Problem(file, line, f"{group}.{key}: unknown id"))
    for section in spec.sections:
        given = text.sections.get(section.id)
        wanted = section.quiz.options if section.quiz else None
        if wanted and given and given.options is not None and len(given.options) != wanted:
            line = lines.get(("sections", section.id, "options"), 1)
            problems.append(
                Problem(
                    file,
                    line,
                    f"sections.{section.id}.options: needs "
                    f"{wanted} options, has {len(given.options)}",
                )
            )
    return problems


def _check_messages(
    file: Path, lines: dict, spec: LessonSpec, text: LessonText, locale: str
) -> list[Problem]:
    """Every grader message of an exercise keeps its contract (lesson.yaml `messages:`): no key
    outside it, exactly its placeholders, and in English every key present (the fallback)."""
    problems = []
    for exercise in spec.exercises:
        given = text.exercises.get(exercise.id)
        for group in ("checks", "diagnoses"):
            contract: dict[str, list[str]] = getattr(exercise.messages, group)
            messages: dict[str, str] = getattr(given, group) if given is not None else {}
            where = ("exercises", exercise.id, group)
            for key, template in messages.items():
                loc = (*where, key)
                if key not in contract:
                    problems.append(
                        Problem(file, line_of(lines, loc), f"{'.'.join(loc)}: not in the "
                                f"exercise's message contract (lesson.yaml messages.{group})")
                    )  # fmt: skip
                    continue
                found, wanted = placeholders(template), set(contract[key])
                if found != wanted:
                    shown = [", ".join(sorted(names)) or "none" for names in (found, wanted)]
                    problems.append(
                        Problem(
                            file,
                            line_of(lines, loc),
                            f"{'.'.join(loc)}: placeholders {{{shown[0]}}} differ from the "
                            f"contract's {{{shown[1]}}}",
                        )
                    )
            if locale == DEFAULT_LOCALE and given is not None:
                for key in contract:
                    if not messages.get(key):
                        loc = (*where, key)
                        problems.append(
                            Problem(
                                file,
                                line_of(lines, loc),
                                f"{'.'.join(loc)}: missing in English (the grader shows it)",
                            )
                        )
    return problems


def _check_english_complete(
    file: Path, lines: dict, spec: LessonSpec, text: LessonText, course: Course
) -> list[Problem]:
    """English is the fallback for every other locale, so it must be whole. A missing part is
    reported at its parent's line, an incomplete one at its own."""
    problems = []
    if not text.title:
        problems.append(Problem(file, line_of(lines, ("title",)), "title: required in English"))
    for section in spec.sections:
        given = text.sections.get(section.id)
        if not _section_complete(section, given):
            what = "missing" if given is None else f"incomplete for kind {section.kind}"
            what += " in English (the text every other locale falls back to)"
            line = line_of(lines, ("sections", section.id))
            problems.append(Problem(file, line, f"sections.{section.id}: {what}"))
    for exercise in spec.exercises:
        if exercise.id not in text.exercises:
            line = line_of(lines, ("exercises", exercise.id))
            problems.append(Problem(file, line, f"exercises.{exercise.id}: missing"))
    for key in course.faq:
        if key not in text.faq:
            problems.append(Problem(file, line_of(lines, ("faq", key)), f"faq.{key}: missing"))
    return problems


def _section_complete(spec: SectionSpec, text: SectionText | None) -> bool:
    if text is None or not text.title:
        return False
    if spec.kind == "quiz":
        options = spec.quiz.options if spec.quiz else 0
        return bool(
            text.question
            and text.explanation
            and text.options
            and len(text.options) == options
            and all(text.options)
        )
    if spec.kind == "recap":
        return bool(text.points)
    return bool(text.body)


def _exercise_complete(text: ExerciseText | None, english: ExerciseText) -> bool:
    return bool(text and text.title and text.instructions and len(text.hints) == len(english.hints))


# --- per-locale view -------------------------------------------------------------------------


@dataclass(frozen=True)
class SectionView:
    spec: SectionSpec
    text: SectionText
    untranslated: bool  # True: `text` is the English fallback


@dataclass(frozen=True)
class FaqView:
    key: str
    text: FaqText
    untranslated: bool


@dataclass(frozen=True)
class ExerciseView:
    exercise: Exercise
    text: ExerciseText
    untranslated: bool
    starter_code: str  # for the editor: translated comments where the locale has them


@dataclass(frozen=True)
class LessonView:
    id: str
    locale: str
    number: int
    total: int
    title: str
    subtitle: str | None
    title_untranslated: bool
    sections: list[SectionView]
    faq: list[FaqView]
    exercises: list[ExerciseView]

    @property
    def untranslated(self) -> bool:
        return (
            self.title_untranslated
            or any(s.untranslated for s in self.sections)
            or any(f.untranslated for f in self.faq)
            or any(e.untranslated for e in self.exercises)
        )


def lesson_view(content: Content, lesson_id: str, locale: str) -> LessonView:
    """The lesson in `locale`; every missing or incomplete part falls back to English."""
    lesson = content.lessons[lesson_id]
    english = lesson.texts[DEFAULT_LOCALE]
    local = lesson.texts.get(locale, LessonText())

    sections = []
    for spec in lesson.spec.sections:
        given = local.sections.get(spec.id)
        translated = _section_complete(spec, given)
        sections.append(
            SectionView(spec, given if translated else english.sections[spec.id], not translated)
        )
    faq = []
    for key in content.course.faq:
        given_faq = local.faq.get(key)
        if given_faq is not None and given_faq.question and given_faq.answer:
            faq.append(FaqView(key, given_faq, False))
        else:
            faq.append(FaqView(key, english.faq[key], True))
    exercises = []
    for spec in lesson.spec.exercises:
        exercise = content.exercises[f"{lesson_id}/{spec.id}"]
        given_ex, english_ex = local.exercises.get(spec.id), english.exercises[spec.id]
        translated_ex = _exercise_complete(given_ex, english_ex)
        exercises.append(
            ExerciseView(
                exercise,
                given_ex if translated_ex else english_ex,
                not translated_ex,
                exercise.starter(locale),
            )
        )
    # Title and subtitle travel together: a page never mixes languages within its header.
    header_translated = bool(local.title) and (bool(local.subtitle) or not english.subtitle)
    header = local if header_translated else english
    return LessonView(
        id=lesson_id,
        locale=locale,
        number=content.lesson_number(lesson_id),
        total=len(content.course.lessons),
        title=header.title or lesson_id,
        subtitle=header.subtitle,
        title_untranslated=not header_translated,
        sections=sections,
        faq=faq,
        exercises=exercises,
    )
