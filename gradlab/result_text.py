"""A stored result's messages written again in another locale (the page's, or the API's
`?locale=`), from the source each message keeps (`i18n`, docs/contracts.md).

Only templates from our own catalogs are ever formatted: the lesson files' checks and
diagnoses, and the platform messages (gradlab/messages.py). What a result holds is data: a
key looked up in those catalogs, and values filled in (floats in the locale's number format).
A message without a source (a result stored before sources existed, a Python traceback), or
whose source no longer fits the catalogs, keeps its stored text.
"""

import copy
from collections.abc import Mapping
from typing import Any

from gradlab.content.loader import Content, format_number
from gradlab.messages import fill, platform_template

GROUPS = ("checks", "diagnoses", "platform")
MAX_VALUES = 32
MAX_VALUE_CHARS = 2000


def _values(raw: Any) -> dict[str, Any] | None:
    """The values of a stored source, if they are plain JSON scalars under string names."""
    if not isinstance(raw, dict) or len(raw) > MAX_VALUES:
        return None
    for name, value in raw.items():
        if not isinstance(name, str) or not name.isidentifier():
            return None
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            return None
        if not isinstance(value, str | int | float):  # bool is an int: shown as stored
            return None
    return raw


def render_message(source: Any, *, content: Content, exercise: str, locale: str) -> str | None:
    """The message `source` describes, in `locale`; None when it cannot be written again."""
    if not isinstance(source, Mapping):
        return None
    group, key = source.get("group"), source.get("key")
    values = _values(source.get("values", {}))
    detail = source.get("detail")
    if group not in GROUPS or not isinstance(key, str) or values is None:
        return None
    if detail is not None and not isinstance(detail, str):
        return None
    if group == "platform":
        template = platform_template(locale, key)
        text = None if template is None else fill(template, values, locale)
    else:
        template = content.exercise_template(
            exercise=exercise,
            locale=locale,
            group=group,  # type: ignore[arg-type]
            key=key,
        )
        text = None if template is None else fill(template, values, locale, format_number)
    if text is None or detail is None:
        return text
    return f"{text}\n\n{detail}"


def _traceback(item: dict[str, Any], error: Any) -> bool:
    """The result's error is the learner's own Python error: no language to change."""
    return item is error and item.get("kind") in ("syntax_error", "runtime_error")


def localize_result(
    result: dict[str, Any], *, content: Content, exercise: str, locale: str
) -> dict[str, Any]:
    """A copy of `result` with every message that keeps its source written in `locale`; the
    others keep their stored text. `locale` in the copy names the new language only when every
    message that was in the stored one could be written again."""
    stored_locale = result.get("locale")
    if locale == stored_locale:
        return result
    localized = copy.deepcopy(result)
    complete = True
    messages: list[Any] = [localized.get("diagnosis"), localized.get("error")]
    for name in ("checks", "notes"):
        items = localized.get(name)
        messages.extend(items if isinstance(items, list) else [])
    for item in messages:
        if not isinstance(item, dict):
            continue
        source = item.get("i18n")
        text = render_message(source, content=content, exercise=exercise, locale=locale)
        if text is not None:
            item["message"] = text
        elif source is not None or not _traceback(item, localized.get("error")):
            complete = False
    if complete:
        localized["locale"] = locale
    return localized
