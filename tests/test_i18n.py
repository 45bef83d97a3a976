"""UI string catalogs: complete, consistent with the templates, compiled, rendered per request.

The catalogs are `app/translations/messages.pot` (extracted with `pybabel extract -F babel.cfg`)
and one `messages.po` per translated locale; `scripts/bootstrap.sh` compiles the `.mo` files.
"""

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from babel.messages.catalog import Catalog, Message
from babel.messages.frontend import CommandLineInterface
from babel.messages.pofile import read_po
from fastapi.testclient import TestClient

from app import i18n
from app.i18n import (
    LANGUAGE_NAMES,
    TRANSLATIONS_DIR,
    CatalogsNotCompiled,
    check_catalogs,
    gettext,
    ngettext,
    translations,
)
from app.rendering import reading_minutes
from app.templating import env
from gradlab.config import DEFAULT_LOCALE, LOCALES, PROJECT_ROOT, Settings
from gradlab.content.loader import lesson_view, load_content
from tests.test_pages import LESSON_URL, LESSONS, Node, get_page

TRANSLATED = [loc for loc in LOCALES if loc != DEFAULT_LOCALE]
POT = TRANSLATIONS_DIR / "messages.pot"
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")
MIN_READ = "%(count)s min read"


def read_catalog(path: Path, locale: str | None = None) -> Catalog:
    with path.open("rb") as f:
        return read_po(f, locale=locale)


def msgids(catalog: Catalog) -> set[str | tuple[str, ...]]:
    return {message.id for message in catalog if message.id}


def forms(message: Message) -> tuple[str, ...]:
    return message.string if isinstance(message.string, tuple) else (message.string,)


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


# --- the catalogs ------------------------------------------------------------------------------


def test_pot_is_up_to_date_with_the_sources(tmp_path: Path) -> None:
    """A new `_()` in a template or in app/ without `pybabel extract` + `update` fails here."""
    extracted = tmp_path / "messages.pot"
    CommandLineInterface().run(
        ["pybabel", "-q", "extract", "-F", str(PROJECT_ROOT / "babel.cfg"),
         "-o", str(extracted), str(PROJECT_ROOT)]
    )  # fmt: skip
    fresh, committed = msgids(read_catalog(extracted)), msgids(read_catalog(POT))
    assert fresh, "extraction found no UI strings: is babel.cfg right?"
    assert not fresh - committed, "run the extract and update commands of docs/translating.md"
    assert not committed - fresh, "the .pot lists strings no source uses any more: extract again"


@pytest.mark.parametrize("locale", TRANSLATED)
def test_every_msgid_is_translated(locale: str) -> None:
    pot = read_catalog(POT)
    po = read_catalog(TRANSLATIONS_DIR / locale / "LC_MESSAGES" / "messages.po", locale)
    assert not po.fuzzy, "the catalog header is marked fuzzy"
    assert msgids(po) == msgids(pot), "run `pybabel update` (docs/translating.md)"
    assert not po.obsolete, f"obsolete entries: {list(po.obsolete)}"
    nplurals = po.num_plurals
    for template in pot:
        if not template.id:
            continue
        message = po[template.id]
        assert message is not None
        assert "fuzzy" not in message.flags, f"fuzzy: {message.id!r}"
        strings = forms(message)
        assert all(s.strip() for s in strings), f"untranslated: {message.id!r}"
        if template.pluralizable:
            assert len(strings) == nplurals, f"{message.id!r} needs {nplurals} plural forms"
            expected = placeholders(template.id[1])
        else:
            expected = placeholders(template.id)
        for string in strings:
            assert placeholders(string) == expected, f"placeholders differ: {message.id!r}"
    assert [errors for _, errors in po.check() if errors] == []  # Babel's own python-format check


def test_plural_rules_come_from_cldr() -> None:
    assert read_catalog(TRANSLATIONS_DIR / "de/LC_MESSAGES/messages.po", "de").num_plurals == 2
    assert read_catalog(TRANSLATIONS_DIR / "tr/LC_MESSAGES/messages.po", "tr").num_plurals == 2
    assert read_catalog(TRANSLATIONS_DIR / "es/LC_MESSAGES/messages.po", "es").num_plurals == 3


def test_compiled_catalogs_are_never_committed() -> None:
    git = shutil.which("git")
    if git is None or not (PROJECT_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        [git, "ls-files", "*.mo"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert tracked == ""
    ignored = subprocess.run(
        [git, "check-ignore", "-q", "app/translations/de/LC_MESSAGES/messages.mo"],
        cwd=PROJECT_ROOT,
    )
    assert ignored.returncode == 0, ".gitignore must ignore *.mo"


# --- missing or stale compiled catalogs fail loudly -------------------------------------------


@pytest.fixture
def translations_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "translations"
    shutil.copytree(TRANSLATIONS_DIR, folder)
    monkeypatch.setattr(i18n, "TRANSLATIONS_DIR", folder)
    translations.cache_clear()
    yield folder
    translations.cache_clear()


def test_missing_mo_fails_with_the_fix(translations_copy: Path, tmp_path: Path) -> None:
    (translations_copy / "tr" / "LC_MESSAGES" / "messages.mo").unlink()
    with pytest.raises(CatalogsNotCompiled, match=r"tr/LC_MESSAGES/messages\.mo is missing"):
        check_catalogs()
    with pytest.raises(CatalogsNotCompiled, match=r"scripts/bootstrap\.sh"):
        translations("tr")
    from app.main import create_app

    with pytest.raises(CatalogsNotCompiled):
        create_app(Settings(data_dir=tmp_path / "data", secret_key="x"))


def test_stale_mo_fails(translations_copy: Path) -> None:
    po = translations_copy / "de" / "LC_MESSAGES" / "messages.po"
    mo = po.with_suffix(".mo")
    stamp = mo.stat().st_mtime
    os.utime(po, (stamp + 10, stamp + 10))
    with pytest.raises(CatalogsNotCompiled, match=r"older than messages\.po"):
        check_catalogs()


def test_template_without_translations_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match=r"app\.templating\.render"):
        env.from_string('{{ _("Lessons") }}').render(locale="de")


# --- gettext from Python and from templates ----------------------------------------------------


def test_python_gettext_uses_the_catalogs() -> None:
    assert gettext("en", "Skip to content") == "Skip to content"
    assert gettext("de", "Skip to content") == "Zum Inhalt springen"
    assert gettext("tr", "Lesson %(n)s of %(m)s", n=2, m=4) == "Ders 2 / 4"
    assert gettext("es", "Exercise: %(title)s", title="X") == "Ejercicio: X"
    with pytest.raises(ValueError):
        translations("fr")


@pytest.mark.parametrize(
    ("locale", "one", "five"),
    [
        ("en", "1 min read", "5 min read"),
        ("de", "1 Minute Lesezeit", "5 Minuten Lesezeit"),
        ("es", "1 minuto de lectura", "5 minutos de lectura"),
        ("tr", "1 dk okuma", "5 dk okuma"),  # Turkish nouns stay singular after a numeral
    ],
)
def test_plural_forms(locale: str, one: str, five: str) -> None:
    assert ngettext(locale, MIN_READ, MIN_READ, 1, count=1) == one
    assert ngettext(locale, MIN_READ, MIN_READ, 5, count=5) == five
    template = env.from_string(
        "{% trans count=n %}{{ count }} min read{% pluralize %}{{ count }} min read{% endtrans %}"
    )
    for n, expected in ((1, one), (5, five)):
        assert template.render(translations=translations(locale), locale=locale, n=n) == expected


def test_newstyle_gettext_escapes_variables() -> None:
    template = env.from_string("{% trans title=t %}Exercise: {{ title }}{% endtrans %}")
    html = template.render(translations=translations("de"), locale="de", t="<b>&</b>")
    assert html == "Übung: &lt;b&gt;&amp;&lt;/b&gt;"


def test_concurrent_renders_keep_their_own_locale() -> None:
    """One shared environment, many threads, four languages: no render sees another's catalog."""
    template = env.get_template("404.html")
    expected = {loc: gettext(loc, "Page not found") for loc in LOCALES}
    assert len(set(expected.values())) == len(LOCALES)

    def render(i: int) -> tuple[str, str]:
        locale = LOCALES[i % len(LOCALES)]
        html = template.render(
            locale=locale, translations=translations(locale), path=lambda loc: f"/{loc}/"
        )
        return locale, html

    with ThreadPoolExecutor(max_workers=8) as pool:
        for locale, html in pool.map(render, range(400)):
            assert f'<html lang="{locale}">' in html
            assert f"<h1>{expected[locale]}</h1>" in html
            others = [text for loc, text in expected.items() if loc != locale]
            assert not any(f"<h1>{text}</h1>" in html for text in others)


# --- pages in every locale -------------------------------------------------------------------


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Node]]:
    from app.main import create_app

    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), content_dir=LESSONS,
                        secret_key="test-secret")  # fmt: skip
    with TestClient(create_app(settings)) as client:
        return {loc: get_page(client, LESSON_URL.format(locale=loc)) for loc in LOCALES}


def test_pages_have_the_chrome_of_their_locale(pages: dict[str, tuple[str, Node]]) -> None:
    skips, labels = {}, {}
    for locale, (html, doc) in pages.items():
        assert f'<html lang="{locale}">' in html
        skips[locale] = doc.find("a", cls="skip").text
        labels[locale] = doc.find("nav", cls="locales").attrs["aria-label"]
        assert skips[locale] == gettext(locale, "Skip to content")
        assert labels[locale] == gettext(locale, "Language")
        buttons = [button.text for button in doc.find_all("button", type="submit")]
        assert gettext(locale, "Check my answer") in buttons
        assert gettext(locale, "Run and grade") in buttons
    assert len(set(skips.values())) == len(set(labels.values())) == len(LOCALES)
    assert skips == {"en": "Skip to content", "es": "Saltar al contenido",
                     "de": "Zum Inhalt springen", "tr": "İçeriğe geç"}  # fmt: skip
    assert labels["de"] == "Sprache" and labels["tr"] == "Dil"


def test_reading_time_uses_the_plural_catalog(pages: dict[str, tuple[str, Node]]) -> None:
    content = load_content(LESSONS)
    for locale, (_, doc) in pages.items():
        minutes = reading_minutes(lesson_view(content, "gradient-accumulation", locale))
        expected = ngettext(locale, MIN_READ, MIN_READ, minutes, count=minutes)
        assert expected in doc.find("p", cls="eyebrow").words


def test_language_names_are_autonyms(pages: dict[str, tuple[str, Node]]) -> None:
    _, doc = pages["tr"]
    nav = doc.find("nav", cls="locales")
    assert [a.text for a in nav.find_all("a")] == [LANGUAGE_NAMES[loc] for loc in LOCALES]


# --- numbers the learner sees ------------------------------------------------------------------


def result_html(locale: str, **result: Any) -> str:
    submission = {
        "status": "failed",
        "result": {
            "status": "failed",
            "score": 5 / 6,
            "error": None,
            "diagnosis": None,
            "checks": [
                {"id": "runs", "passed": True, "points": 0.5, "max_points": 1.0, "message": "ok"}
            ],
            "output": {"stdout": "", "stderr": "", "truncated": False},
            "device": "cpu",
            "timings": {"queued_s": 0.0, "run_s": 0.4, "total_s": 0.4213},
            **result,
        },
    }
    return env.get_template("_result.html").render(
        locale=locale, translations=translations(locale), submission=submission
    )


@pytest.mark.parametrize(
    ("locale", "seconds", "score", "points"),
    [
        ("en", "Ran on CPU in 0.42 s.", "Score: 83%", "(0.5/1)"),
        ("es", "Ejecutado en CPU en 0,42 s.", "Puntuación: 83\xa0%", "(0,5/1)"),
        ("de", "Lief auf CPU in 0,42 s.", "Punkte: 83\xa0%", "(0,5/1)"),
        ("tr", "CPU üzerinde 0,42 sn'de çalıştı.", "Puan: %83", "(0,5/1)"),
    ],
)
def test_numbers_are_formatted_per_locale(
    locale: str, seconds: str, score: str, points: str
) -> None:
    html = result_html(locale)
    assert seconds in html
    assert score in html
    assert points in html
    assert gettext(locale, "Not yet right") in html


def test_almost_full_marks_never_read_100_percent() -> None:
    assert "Score: 99%" in result_html("en", score=0.999)
    assert "Score: 100%" in result_html("en", score=1.0)
