"""`gradlab lessons stamp`: record in a locale file which English text each part translates.

The file is edited as text, one `source: <hash>` line per part, so that the translator's
comments, order and formatting stay exactly as they were.
"""

import re
from pathlib import Path

from gradlab.config import DEFAULT_LOCALE
from gradlab.content.loader import Content
from gradlab.content.translation import locale_status


class StampError(ValueError):
    """The request cannot be carried out (unknown part, nothing translated, flow style...)."""


def _child_indent(lines: list[str], key_index: int) -> str:
    """The indentation of the first entry under the key on line `key_index` (0-based)."""
    key_indent = len(lines[key_index]) - len(lines[key_index].lstrip(" "))
    for line in lines[key_index + 1 :]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent > key_indent:
            return " " * indent
        break
    raise StampError(f"line {key_index + 1}: not a block mapping (write it one key per line)")


def stamp(
    content: Content, *, lesson: str, locale: str, keys: list[str] | None = None
) -> list[str]:
    """Write the current English hash into each translated part of `lesson`/`locale`: the
    parts named in `keys` (outdated ones included: the translator says they are up to date),
    or else every translated part that has no hash yet. Returns the keys stamped."""
    if locale == DEFAULT_LOCALE:
        raise StampError("English is the source: there is nothing to stamp")
    if lesson not in content.lessons:
        raise StampError(f"unknown lesson {lesson!r}")
    status = locale_status(content, lesson, locale)
    if not status.exists:
        raise StampError(f"{status.file} does not exist yet")
    hashed = {p.key: p for p in status.parts if p.current is not None}
    if keys:
        unknown = [k for k in keys if k not in hashed]
        if unknown:
            raise StampError(f"not a stampable part: {', '.join(unknown)}")
        chosen = [hashed[k] for k in keys]
        missing = [p.key for p in chosen if p.state == "missing"]
        if missing:
            raise StampError(f"not translated, nothing to stamp: {', '.join(missing)}")
    else:
        chosen = [p for p in hashed.values() if p.state == "unstamped"]
    line_map = content.lessons[lesson].lines[locale]
    file: Path = status.file
    lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
    edits: list[tuple[int, str, bool]] = []  # (0-based line, text, replace?)
    for part in chosen:
        loc = () if part.key == "header" else tuple(part.key.split(".", 1))
        existing = line_map.get((*loc, "source"))
        if existing is not None:
            old = lines[existing - 1]
            edits.append((existing - 1, re.sub(r"source:.*", f"source: {part.current}", old), True))
        elif part.key == "header":
            edits.append((line_map[("title",)] - 1, f"source: {part.current}\n", False))
        else:
            index = line_map[loc] - 1
            indent = _child_indent(lines, index)
            edits.append((index + 1, f"{indent}source: {part.current}\n", False))
    for index, text, replace in sorted(edits, key=lambda e: e[0], reverse=True):
        if replace:
            lines[index] = text
        else:
            lines.insert(index, text)
    file.write_text("".join(lines), encoding="utf-8")
    return [p.key for p in chosen]
