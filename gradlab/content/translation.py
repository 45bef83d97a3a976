"""Translation status: which parts of each locale file are translated, missing or outdated.

A translated part (a section, a FAQ answer, an exercise, the title + subtitle) may carry
`source: <hash>`, the hash of the English part it was translated from; `gradlab lessons stamp`
writes it. When the English later changes, the hashes stop matching and the part is reported
as outdated until a translator updates it and stamps it again. An exercise's grader messages
(its `diagnoses` and `checks`) are single strings: they are only reported as present or missing,
and are not part of the exercise's hash.
"""

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from gradlab.config import DEFAULT_LOCALE, LOCALES
from gradlab.content.loader import Content, Lesson, lesson_view
from gradlab.content.schema import LessonText
from gradlab.content.yamlfile import Path_, Problem, line_of

PartState = Literal["translated", "outdated", "unstamped", "missing"]
MESSAGE_GROUPS = {"source", "diagnoses", "checks"}  # not hashed with their exercise


def source_hash(value: BaseModel | dict) -> str:
    """A short, stable hash of an English part's text (its `source` field excluded)."""
    data = value.model_dump(exclude={"source"}) if isinstance(value, BaseModel) else value
    canonical = json.dumps(data, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]


def _words(value: BaseModel | dict | str) -> int:
    text = value if isinstance(value, str) else json.dumps(_dump(value), ensure_ascii=False)
    return len(re.findall(r"\w+", text))


def _dump(value: BaseModel | dict) -> dict:
    return value.model_dump(exclude={"source"}) if isinstance(value, BaseModel) else value


@dataclass(frozen=True)
class PartStatus:
    key: str  # "header", "sections.<id>", "faq.<key>", "exercises.<id>",
    # "exercises.<id>.diagnoses.<code>", "exercises.<id>.checks.<key>"
    state: PartState
    words: int  # English words: the part's weight in the translated share
    line: int  # where the part is (or its parent, when missing) in the locale file
    stored: str | None = None  # the hash the translation was made from
    current: str | None = None  # the hash of today's English


@dataclass(frozen=True)
class LocaleStatus:
    lesson: str
    locale: str
    file: Path
    exists: bool
    parts: list[PartStatus]

    @property
    def translated_share(self) -> float:
        """Share of the English words whose part is translated (outdated ones included)."""
        total = sum(p.words for p in self.parts)
        done = sum(p.words for p in self.parts if p.state != "missing")
        return done / total if total else 1.0

    def keys(self, state: PartState) -> list[str]:
        return [p.key for p in self.parts if p.state == state]


def _english_parts(lesson: Lesson, content: Content) -> dict[str, BaseModel | dict]:
    english = lesson.texts[DEFAULT_LOCALE]
    parts: dict[str, BaseModel | dict] = {
        "header": {"title": english.title, "subtitle": english.subtitle}
    }
    parts.update({f"sections.{s.id}": english.sections[s.id] for s in lesson.spec.sections})
    parts.update({f"faq.{key}": english.faq[key] for key in content.course.faq})
    parts.update(
        {
            f"exercises.{e.id}": english.exercises[e.id].model_dump(exclude=MESSAGE_GROUPS)
            for e in lesson.spec.exercises
        }
    )
    return parts


def _stored(text: LessonText, key: str) -> str | None:
    if key == "header":
        return text.source
    group, name = key.split(".", 1)
    part = getattr(text, group).get(name)
    return getattr(part, "source", None)


def _loc(key: str) -> Path_:
    return () if key == "header" else tuple(key.split(".", 1))


def locale_status(content: Content, lesson_id: str, locale: str) -> LocaleStatus:
    lesson = content.lessons[lesson_id]
    view = lesson_view(content, lesson_id, locale)
    text = lesson.texts.get(locale, LessonText())
    lines = lesson.lines.get(locale, {})
    untranslated = {"header"} if view.title_untranslated else set()
    untranslated |= {f"sections.{s.spec.id}" for s in view.sections if s.untranslated}
    untranslated |= {f"faq.{f.key}" for f in view.faq if f.untranslated}
    untranslated |= {f"exercises.{e.exercise.spec.id}" for e in view.exercises if e.untranslated}
    parts = []
    for key, english in _english_parts(lesson, content).items():
        current, stored = source_hash(english), _stored(text, key)
        if key in untranslated:
            state: PartState = "missing"
        elif stored is None:
            state = "unstamped"
        else:
            state = "translated" if stored == current else "outdated"
        line = line_of(lines, _loc(key)) if key != "header" else lines.get(("title",), 1)
        parts.append(PartStatus(key, state, _words(english), line, stored, current))
    english_text = lesson.texts[DEFAULT_LOCALE]
    for exercise in lesson.spec.exercises:
        english_exercise = english_text.exercises[exercise.id]
        local_exercise = text.exercises.get(exercise.id)
        for group in ("diagnoses", "checks"):
            for name, message in getattr(english_exercise, group).items():
                local = getattr(local_exercise, group) if local_exercise is not None else {}
                loc = ("exercises", exercise.id, group, name)
                state = "translated" if local.get(name) else "missing"
                parts.append(PartStatus(".".join(loc), state, _words(message), line_of(lines, loc)))
    folder = content.content_dir / lesson_id if content.content_dir else Path(lesson_id)
    return LocaleStatus(
        lesson=lesson_id,
        locale=locale,
        file=lesson.files.get(locale, folder / f"{locale}.yaml"),
        exists=locale in lesson.files,
        parts=parts,
    )


def translation_status(content: Content) -> list[LocaleStatus]:
    """Every lesson x every locale but English, in course order."""
    return [
        locale_status(content, lesson_id, locale)
        for lesson_id in [entry.id for entry in content.course.lessons]
        if lesson_id in content.lessons
        for locale in LOCALES
        if locale != DEFAULT_LOCALE
    ]


def translation_warnings(content: Content) -> list[Problem]:
    """What `gradlab lessons check` warns about: gaps and stale translations, never errors."""
    warnings = []
    for status in translation_status(content):
        if not status.exists:
            warnings.append(Problem(status.file, 1, "not translated yet (shown in English)"))
            continue
        for part in status.parts:
            if part.state == "missing":
                message = f"{part.key}: not translated yet (shown in English)"
            elif part.state == "outdated":
                message = (
                    f"{part.key}: the English changed since this was translated "
                    f"(source {part.stored}, English now {part.current}); update it, then run "
                    f"`gradlab lessons stamp {status.lesson} {status.locale} {part.key}`"
                )
            elif part.state == "unstamped":
                message = (
                    f"{part.key}: no source hash; once it matches the English, run "
                    f"`gradlab lessons stamp {status.lesson} {status.locale}`"
                )
            else:
                continue
            warnings.append(Problem(status.file, part.line, message))
    return warnings
