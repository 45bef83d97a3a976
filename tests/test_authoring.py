"""Tools for authors and translators: `gradlab lessons check|status|stamp|schema`, the
documented errors of broken content, and hot reload that keeps the last good content."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gradlab.config import LOCALES, PROJECT_ROOT
from gradlab.content.loader import load_content
from gradlab.content.schema_files import SCHEMA_DIR, SCHEMAS, stale_schema_files
from gradlab.content.stamp import StampError, stamp
from gradlab.content.store import ContentStore
from gradlab.content.translation import locale_status, source_hash, translation_warnings

FIXTURES = Path(__file__).parent / "fixtures"
CASES = yaml.safe_load((FIXTURES / "invalid_content.yaml").read_text(encoding="utf-8"))
REAL = PROJECT_ROOT / "lessons"


def _check(content_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradlab.cli", "lessons", "check", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GRADLAB_CONTENT_DIR": str(content_dir)},
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the partial fixture (with its schema files, so that they are current)."""
    root = Path(shutil.copytree(FIXTURES / "partial", tmp_path / "lessons"))
    shutil.copytree(REAL / SCHEMA_DIR, root / SCHEMA_DIR)
    return root


def _apply(root: Path, edits: list[dict[str, str]]) -> None:
    for change in edits:
        path = root / change["file"]
        text = path.read_text(encoding="utf-8")
        assert text.count(change["old"]) == 1, change
        path.write_text(text.replace(change["old"], change["new"]), encoding="utf-8")


# --- lessons check: the documented errors ------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_broken_content_gives_exactly_the_documented_error(tree: Path, case: dict) -> None:
    _apply(tree, case["edits"])
    result = _check(tree)
    assert result.returncode == 1
    errors = [
        line.replace(f"{tree}/", "") for line in result.stderr.splitlines() if ": error: " in line
    ]
    assert errors == case["expect"]


def test_every_documented_error_is_in_the_docs() -> None:
    docs = (PROJECT_ROOT / "docs" / "content-format.md").read_text(encoding="utf-8")
    for case in CASES:
        for line in case["expect"]:
            assert line in docs, f"docs/content-format.md does not show: {line}"


def test_real_content_is_clean_and_complete() -> None:
    """The course as shipped: no errors and no warnings, even with --strict."""
    result = _check(REAL, "--strict")
    assert result.returncode == 0, result.stderr
    assert "0 error(s), 0 warning(s)" in result.stdout


def test_missing_translations_warn_but_pass_unless_strict(tree: Path) -> None:
    relaxed = _check(tree)
    assert relaxed.returncode == 0, relaxed.stderr
    warnings = [line for line in relaxed.stderr.splitlines() if ": warning: " in line]
    de = tree / "warmup" / "de.yaml"
    assert f"{tree / 'warmup' / 'es.yaml'}:1: warning: not translated yet (shown in English)" in (
        warnings
    )
    assert any(
        w.startswith(f"{de}:") and "sections.recap: not translated yet" in w for w in warnings
    )
    assert _check(tree, "--strict").returncode == 1


# --- translation status and source hashes ------------------------------------------------------


def test_status_counts_the_share_of_english_words_translated(tree: Path) -> None:
    content = load_content(tree)
    de = locale_status(content, "warmup", "de")
    assert set(de.keys("missing")) == {
        "sections.schedule",
        "sections.recap",
        "faq.how-long",
        "exercises.linear-warmup",
        "exercises.linear-warmup.diagnoses.no_warmup",
    }
    assert 0.2 < de.translated_share < 0.8
    tr = locale_status(content, "warmup", "tr")
    assert tr.keys("missing") == [] and tr.translated_share == 1.0
    es = locale_status(content, "warmup", "es")
    assert not es.exists and es.translated_share == 0.0


def test_stamp_then_an_english_edit_marks_the_translation_outdated(tree: Path) -> None:
    content = load_content(tree)
    assert "sections.why-warmup" in locale_status(content, "warmup", "tr").keys("unstamped")
    tr = tree / "warmup" / "tr.yaml"
    before = tr.read_text(encoding="utf-8")
    stamped = stamp(content, lesson="warmup", locale="tr")
    assert "sections.why-warmup" in stamped and "header" in stamped
    after = tr.read_text(encoding="utf-8")
    # only `source:` lines were added; comments and everything else stay as they were
    added = [line for line in after.splitlines() if line not in before.splitlines()]
    assert added and all(line.strip().startswith("source: ") for line in added)
    content = load_content(tree)
    status = locale_status(content, "warmup", "tr")
    assert status.keys("unstamped") == [] and status.keys("outdated") == []

    _apply(tree, [{"file": "warmup/en.yaml", "old": "can be large.", "new": "can be huge."}])
    content = load_content(tree)
    status = locale_status(content, "warmup", "tr")
    assert status.keys("outdated") == ["sections.why-warmup"]
    english = content.lessons["warmup"].texts["en"].sections["why-warmup"]
    part = next(p for p in status.parts if p.key == "sections.why-warmup")
    assert part.current == source_hash(english) != part.stored
    warning = next(
        w for w in translation_warnings(content) if w.file == tr and "why-warmup" in w.message
    )
    assert warning.file == tr and "the English changed" in warning.message
    assert tr.read_text(encoding="utf-8").splitlines()[warning.line - 1].strip() == "why-warmup:"

    # the translator updates the text and says so: stamped again, one line replaced
    assert stamp(content, lesson="warmup", locale="tr", keys=["sections.why-warmup"]) == [
        "sections.why-warmup"
    ]
    assert locale_status(load_content(tree), "warmup", "tr").keys("outdated") == []
    assert tr.read_text(encoding="utf-8").count("source:") == after.count("source:")


def test_stamp_refuses_what_it_cannot_do(tree: Path) -> None:
    content = load_content(tree)
    with pytest.raises(StampError, match="not translated"):
        stamp(content, lesson="warmup", locale="de", keys=["sections.recap"])
    with pytest.raises(StampError, match="does not exist"):
        stamp(content, lesson="warmup", locale="es")
    with pytest.raises(StampError, match="not a stampable part"):
        stamp(content, lesson="warmup", locale="de", keys=["sections.nope"])


def test_real_translations_are_stamped_and_current(content) -> None:  # type: ignore[no-untyped-def]
    for lesson in content.lessons:
        for locale in LOCALES[1:]:
            status = locale_status(content, lesson, locale)
            assert status.keys("unstamped") == [] and status.keys("outdated") == [], (
                lesson,
                locale,
            )


# --- JSON Schema for editors -------------------------------------------------------------------


def test_committed_json_schemas_are_current() -> None:
    assert stale_schema_files(REAL) == [], "run `gradlab lessons schema` and commit the result"


def test_a_stale_schema_fails_the_check(tree: Path) -> None:
    path = tree / SCHEMA_DIR / "locale.schema.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"title"', '"titel"', 1))
    result = _check(tree)
    assert result.returncode == 1 and f"{path}:1: error: stale" in result.stderr


def test_every_content_file_names_its_schema_for_editors() -> None:
    headers = {
        REAL / "course.yaml": "./schema/course.schema.json",
        **{path: "../schema/lesson.schema.json" for path in REAL.glob("*/lesson.yaml")},
        **{
            path: "../schema/locale.schema.json"
            for locale in LOCALES
            for path in REAL.glob(f"*/{locale}.yaml")
        },
    }
    assert len(headers) == 1 + 4 + 16
    for path, schema in headers.items():
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first == f"# yaml-language-server: $schema={schema}", path
        assert (path.parent / schema).resolve().is_file()
    assert set(SCHEMAS) == {p.name for p in (REAL / SCHEMA_DIR).iterdir()}


# --- hot reload -------------------------------------------------------------------------------


def _touch_later(path: Path) -> None:
    """Make sure an edit changes the file's mtime even on coarse-grained file systems."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_store_reloads_an_edit_and_keeps_the_last_good_content_on_a_broken_one(
    tree: Path,
) -> None:
    store = ContentStore(tree, check_interval_s=0.01)
    english = store.get().lessons["warmup"].texts["en"]
    assert english.sections["schedule"].title == "A linear schedule"

    en = tree / "warmup" / "en.yaml"
    _apply(tree, [{"file": "warmup/en.yaml", "old": "A linear schedule", "new": "A straight ramp"}])
    _touch_later(en)
    time.sleep(0.02)
    assert store.get().lessons["warmup"].texts["en"].sections["schedule"].title == (
        "A straight ramp"
    )
    assert store.error is None

    _apply(
        tree,
        [
            {
                "file": "warmup/en.yaml",
                "old": "    title: A straight ramp\n",
                "new": "    title: [unclosed\n",
            }
        ],
    )
    _touch_later(en)
    time.sleep(0.02)
    kept = store.get()
    assert kept.lessons["warmup"].texts["en"].sections["schedule"].title == "A straight ramp"
    assert store.error is not None
    assert str(store.error).startswith(f"{en}:")

    _apply(
        tree,
        [{"file": "warmup/en.yaml", "old": "    title: [unclosed\n", "new": "    title: Fixed\n"}],
    )
    _touch_later(en)
    time.sleep(0.02)
    assert store.get().lessons["warmup"].texts["en"].sections["schedule"].title == "Fixed"
    assert store.error is None


def test_store_with_reload_off_never_looks(tree: Path) -> None:
    store = ContentStore(tree, check_interval_s=0)
    _apply(tree, [{"file": "warmup/en.yaml", "old": "A linear schedule", "new": "Changed"}])
    _touch_later(tree / "warmup" / "en.yaml")
    assert store.get().lessons["warmup"].texts["en"].sections["schedule"].title == (
        "A linear schedule"
    )


def test_running_server_serves_the_last_good_content_and_shows_the_error(
    tree: Path, tmp_path: Path
) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from gradlab.config import Settings

    settings = Settings(
        data_dir=tmp_path / "data", content_dir=tree, secret_key="t", content_reload_s=0.01
    )
    with TestClient(create_app(settings)) as client:
        assert "A linear schedule" in client.get("/en/lessons/warmup").text
        en = tree / "warmup" / "en.yaml"
        _apply(tree, [{"file": "warmup/en.yaml", "old": "A linear schedule", "new": "A ramp"}])
        _touch_later(en)
        time.sleep(0.02)
        assert "A ramp" in client.get("/en/lessons/warmup").text

        _apply(
            tree,
            [
                {
                    "file": "warmup/en.yaml",
                    "old": "    title: A ramp\n",
                    "new": "    titel: A ramp\n",
                }
            ],
        )
        _touch_later(en)
        time.sleep(0.02)
        page = client.get("/en/lessons/warmup")
        assert page.status_code == 200 and "A ramp" in page.text  # the last good content
        report = client.get("/api/v1/translations").json()
        assert report["content_errors"] == [
            {
                "file": "warmup/en.yaml",
                "line": 11,
                "message": "sections.schedule.titel: unknown key (a typo? see the schema in "
                "lessons/schema/)",
            }
        ]
        de = next(i for i in report["items"] if (i["lesson"], i["locale"]) == ("warmup", "de"))
        assert "sections.recap" in de["missing"] and 0 < de["translated_share"] < 1

        page = client.get("/de/authoring/translations")
        assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
        assert "Stand der Übersetzungen" in page.text
        assert "Die letzte Änderung am Inhalt wurde nicht geladen" in page.text
        assert "<code>warmup/en.yaml:11</code>: sections.schedule.titel: unknown key" in page.text
        assert '<meta name="robots" content="noindex">' in page.text
        # the lesson by its German title, its id second (the stamp command takes the id)
        title = page.text.split('class="lesson-title">', 1)[1].split("</th>", 1)[0]
        assert title.split("<br>")[0].strip() == "Aufwärmen der Lernrate"
        assert '<code class="lesson-id">warmup</code>' in title
        row = page.text.split('id="warmup-es"', 1)[1].split("</tr>", 1)[0]
        assert "noch keine Datei" in row and "<td>0\xa0%</td>" in row  # German: 0 %, no break
