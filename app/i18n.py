"""UI strings of the site chrome (gettext catalogs compiled by Babel) and locale negotiation.

English msgids are the source; `app/translations/<locale>/LC_MESSAGES/messages.po` holds the
translations, compiled to `.mo` by `scripts/bootstrap.sh` (see docs/translating.md). Templates
reach the same catalogs through `jinja2.ext.i18n` (`app/templating.py`); Python code uses
`gettext`/`ngettext` below.
"""

import math
from functools import cache
from pathlib import Path

from babel.numbers import format_decimal, format_percent
from babel.support import NullTranslations, Translations

from gradlab.config import DEFAULT_LOCALE, LOCALES

LANGUAGE_NAMES = {"en": "English", "es": "Español", "de": "Deutsch", "tr": "Türkçe"}
TRANSLATIONS_DIR = Path(__file__).resolve().parent / "translations"
DOMAIN = "messages"
COMPILE_COMMAND = "scripts/bootstrap.sh (or: .venv/bin/pybabel compile -d app/translations)"


class CatalogsNotCompiled(RuntimeError):
    """A locale's .mo file is missing or older than its .po: the install step did not run."""


def catalog_paths(locale: str) -> tuple[Path, Path]:
    """The (.po, .mo) pair of a translated locale."""
    folder = TRANSLATIONS_DIR / locale / "LC_MESSAGES"
    return folder / f"{DOMAIN}.po", folder / f"{DOMAIN}.mo"


def check_catalogs() -> None:
    """Fail loudly, naming the fix, if any translated locale's catalog was not compiled."""
    problems = []
    for locale in LOCALES:
        if locale == DEFAULT_LOCALE:
            continue
        po, mo = catalog_paths(locale)
        if not mo.exists():
            problems.append(f"{mo} is missing")
        elif po.exists() and po.stat().st_mtime > mo.stat().st_mtime:
            problems.append(f"{mo} is older than {po.name}")
    if problems:
        raise CatalogsNotCompiled(
            "UI translation catalogs are not compiled ("
            + "; ".join(problems)
            + f"). Run {COMPILE_COMMAND}."
        )


@cache
def translations(locale: str) -> NullTranslations:
    """The locale's compiled catalog, loaded once per process (the msgids are English)."""
    if locale not in LOCALES:
        raise ValueError(f"unknown locale {locale!r}")
    if locale == DEFAULT_LOCALE:
        return NullTranslations()
    check_catalogs()
    _, mo = catalog_paths(locale)
    with mo.open("rb") as fp:
        return Translations(fp, domain=DOMAIN)


def gettext(locale: str, message: str, **variables: object) -> str:
    """`message` in `locale`, %-formatted with `variables` when given (like the templates' _)."""
    text = translations(locale).gettext(message)
    return text % variables if variables else text


def ngettext(locale: str, singular: str, plural: str, num: int, **variables: object) -> str:
    """The plural form for `num` in `locale`; `%(num)s` and `variables` are filled in."""
    return translations(locale).ngettext(singular, plural, num) % {"num": num, **variables}


def format_number(value: float, locale: str, digits: int | None = None) -> str:
    """A number as the locale writes it: `digits` fixed decimals, or as few as needed."""
    if digits is None:
        return format_decimal(value, locale=locale)
    pattern = "#,##0." + "0" * digits if digits else "#,##0"
    return format_decimal(value, format=pattern, locale=locale)


def format_share(value: float, locale: str) -> str:
    """A share in [0, 1] as a whole percentage, e.g. 0.42 -> '42 %' (de) or '%42' (tr).
    Rounded down, so that anything short of full marks never reads as 100 %."""
    return format_percent(math.floor(value * 100 + 1e-9) / 100, locale=locale)


def negotiate(cookie: str | None, accept_language: str | None) -> str:
    """The remembered choice, else the best Accept-Language match, else English."""
    if cookie in LOCALES:
        return cookie
    ranked: list[tuple[float, int, str]] = []
    for position, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                continue
        primary = tag.strip().lower().split("-")[0]
        if primary in LOCALES and quality > 0:
            ranked.append((-quality, position, primary))
    return min(ranked)[2] if ranked else DEFAULT_LOCALE
