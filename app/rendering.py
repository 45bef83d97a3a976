"""Markdown to safe HTML (raw HTML in content is escaped) and reading-time estimates."""

import re
from functools import lru_cache

from markdown_it import MarkdownIt
from markupsafe import Markup

from gradlab.content.loader import LessonView

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
WORDS_PER_MINUTE = 200  # prose; code is read slower and counts double


@lru_cache(maxsize=4096)
def markdown(text: str | None) -> Markup:
    return Markup(_markdown.render(text or ""))


def markdown_inline(text: str | None) -> Markup:
    return Markup(_markdown.renderInline(text or ""))


def reading_minutes(view: LessonView) -> int:
    words = 0
    for section in view.sections:
        for part in (section.text.body, section.text.question, section.text.explanation):
            words += len(re.findall(r"\w+", part or ""))
        words += sum(len(re.findall(r"\w+", p)) for p in section.text.points or [])
        words += 2 * len(re.findall(r"\w+", section.spec.code or ""))
    return max(1, round(words / WORDS_PER_MINUTE))
