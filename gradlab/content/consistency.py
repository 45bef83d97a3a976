"""Cross-locale checks of a lesson's prose: what a translation must keep from the English.

A locale file may leave parts out (they fall back to English), but what it does contain must be
valid markdown and must keep the English's code blocks byte for byte and the placeholders of
every grader message: code is not translated, and a lost `{placeholder}` would show a learner
a half-filled message.
"""

import functools
import string
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

from gradlab.config import DEFAULT_LOCALE
from gradlab.content.schema import LessonText
from gradlab.content.yamlfile import Path_, Problem, line_of

_markdown = MarkdownIt("commonmark")
MARKDOWN_FIELDS = ("body", "explanation", "instructions", "answer")


@functools.lru_cache(maxsize=4096)
def _tokens(text: str) -> tuple[Token, ...]:
    """A field's markdown tokens, read only. Parsed once per text: each field is checked on
    its own and its code blocks are compared with the English's, for three locales, on every
    load and content reload."""
    return tuple(_markdown.parse(text))


def _fences(text: str) -> list[str]:
    return [token.content for token in _tokens(text) if token.type == "fence"]


def markdown_problems(text: str) -> list[str]:
    """What is wrong with one markdown field, in words (an empty list: nothing)."""
    problems = []
    lines = text.splitlines()
    opened = [line for line in lines if line.lstrip().startswith(("```", "~~~"))]
    if len(opened) % 2:
        problems.append("a ``` code fence is never closed")
    for token in _tokens(text):
        if token.type == "html_block":
            problems.append("raw HTML is not allowed (it would be shown as text)")
        for child in token.children or []:
            if child.type == "html_inline":
                problems.append(f"raw HTML {child.content!r} is not allowed (shown as text)")
            elif child.type == "text" and "`" in child.content and "\\`" not in text:
                problems.append("an inline `code` span is not closed (odd number of backticks)")
    return list(dict.fromkeys(problems))


def _markdown_fields(text: LessonText) -> list[tuple[Path_, str]]:
    """Every markdown field of a locale file with its location in the file."""
    fields: list[tuple[Path_, str]] = []
    for group in ("sections", "faq", "exercises"):
        for key, part in getattr(text, group).items():
            for name in MARKDOWN_FIELDS:
                value = getattr(part, name, None)
                if value:
                    fields.append(((group, key, name), value))
    return fields


def placeholders(template: str) -> set[str]:
    try:
        return {field for _, field, _, _ in string.Formatter().parse(template) if field}
    except ValueError:
        return {"(malformed braces)"}


def check_locale(
    *, file: Path, lines: dict[Path_, int], text: LessonText, locale: str, english: LessonText
) -> list[Problem]:
    """Problems of one locale file measured against the English (which is checked against
    itself for markdown only)."""
    problems = []
    english_fields = dict(_markdown_fields(english))
    for loc, value in _markdown_fields(text):
        where = ".".join(map(str, loc))
        for reason in markdown_problems(value):
            problems.append(Problem(file, line_of(lines, loc), f"{where}: {reason}"))
        if locale == DEFAULT_LOCALE or loc not in english_fields:
            continue
        if _fences(value) != _fences(english_fields[loc]):
            problems.append(
                Problem(
                    file,
                    line_of(lines, loc),
                    f"{where}: its code blocks differ from the English ones "
                    "(code is not translated: copy them unchanged)",
                )
            )
    return problems
