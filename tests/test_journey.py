"""The learner's whole journey in a real browser (Debian's chromium driven by Playwright) on a
real `gradlab serve` with its sandboxed worker, once per locale:

anonymous learner opens lesson 2 -> quick check wrong, then right -> types a buggy loop into the
editor, Ctrl+Enter, reads the diagnosis in their language with the weights chart -> hints one at a
time -> fixes the loop, "passed" -> registers (the anonymous work joins the account) -> logs in
from a second browser and finds the progress and "continue where you left off" on the course page.

Throughout: no CSP violations, no console errors, and Tab leaves the editor after Esc (as the
help text says). Screenshots (per locale: the diagnosis, the whole page after "passed", the
course page after logging in) land in $GRADLAB_TEST_ARTIFACTS/journey, else pytest's tmp folder.
"""

import html
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from app.i18n import format_share, gettext, ngettext
from app.rendering import markdown, markdown_inline
from gradlab.config import PROJECT_ROOT
from tests.test_browser import CONTENT, CORPUS, EDITOR, _page, _set_code

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

pytestmark = pytest.mark.slow

LESSON = "gradient-accumulation"
EXERCISE = "accumulate"
LESSON_DIR = PROJECT_ROOT / "lessons" / LESSON
SPEC = yaml.safe_load((LESSON_DIR / "lesson.yaml").read_text(encoding="utf-8"))
QUIZ = next(s for s in SPEC["sections"] if s["kind"] == "quiz")
SECTION_IDS = {s["id"] for s in SPEC["sections"]} | {
    f"exercise-{e['id']}" for e in SPEC["exercises"]
}
PASSWORD = "journey-password-1"
HELP = (
    "Ctrl+Enter (⌘+Enter on a Mac) runs and grades your code. Tab indents; "
    "press Esc, then Tab, to leave the editor."
)
SECTION = f"#exercise-{EXERCISE}"
SUBMIT = f"{SECTION} form.submit-form button[type=submit]"
GRADING_TIMEOUT_MS = 90_000


def learner_code(name: str) -> str:
    """A corpus loop as a learner would type it (without the corpus's `# expect:` line)."""
    lines = (CORPUS / name).read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("# expect:"))


def texts(locale: str) -> dict[str, Any]:
    return yaml.safe_load((LESSON_DIR / f"{locale}.yaml").read_text(encoding="utf-8"))


def words(text: str) -> str:
    """Whitespace collapsed, so rendered text compares with the page's innerText."""
    return " ".join(text.split())


def plain(rendered: str) -> str:
    """The visible text of server-rendered markdown."""
    return words(html.unescape(re.sub(r"<[^>]+>", "", rendered)))


def diagnosis_pattern(template: str) -> re.Pattern[str]:
    """The localized diagnosis with its placeholders as named groups (numbers in either
    decimal notation, so a locale-aware formatting of the ratio keeps this test passing)."""
    parts = re.split(r"\{(\w+)\}", template)
    pattern = "".join(
        re.escape(part) if i % 2 == 0 else rf"(?P<{part}>\d+(?:[.,]\d+)?)"
        for i, part in enumerate(parts)
    )
    return re.compile(pattern)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("GRADLAB_TEST_ARTIFACTS")
    if not chosen:
        return tmp_path_factory.mktemp("journey")
    folder = Path(chosen) / "journey"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Watch:
    """A page's CSP violations (test_browser's listener; its list is per document, so it is
    collected before every navigation), page errors (test_browser's listener) and every console
    error, with its URL (a failed resource load names only the status in its text)."""

    def __init__(self, page: "Page", problems: list[str]) -> None:
        self.page, self.problems = page, problems
        self.csp: list[str] = []
        self.console: list[str] = []
        page.on(
            "console",
            lambda m: (
                self.console.append(f"{m.text} at {m.location.get('url')}")
                if m.type == "error"
                else None
            ),
        )

    def checkpoint(self) -> None:
        self.csp += self.page.evaluate("window.__csp || []")

    def assert_clean(self) -> None:
        self.checkpoint()
        assert self.csp == [], f"CSP violations: {self.csp}"
        assert self.console == [], f"console errors: {self.console}"
        assert self.problems == [], f"page errors: {self.problems}"


def _open(browser: "Browser") -> tuple["BrowserContext", "Page", Watch]:
    context, page, problems = _page(browser, viewport={"width": 1280, "height": 900})
    return context, page, Watch(page, problems)


def _active_is(page: "Page", selector: str) -> bool:
    return bool(
        page.evaluate("(s) => document.activeElement === document.querySelector(s)", selector)
    )


def _result_heading(locale: str, status: str) -> str:
    return gettext(locale, "Result: %(status)s", status=gettext(locale, status))


def _wait_for_progress(
    server: str, page: "Page", predicate: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The page's own progress (its cookies), polled until `predicate` holds (progress.js
    reports asynchronously)."""
    deadline = time.monotonic() + 10
    while True:
        body = page.context.request.get(f"{server}/api/v1/progress").json()
        if predicate(body["lessons"][LESSON]) or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def _answer_quiz(page: "Page", watch: Watch, answer: int, outcome: str) -> None:
    """Answer the quick check; the outcome comes in place (static/js/quiz.js), no reload."""
    watch.checkpoint()
    page.check(f"form.quiz input[name=answer][value='{answer}']")
    page.evaluate("window.__sameDocument = true")
    page.click("form.quiz button[type=submit]")
    page.wait_for_selector(f"form.quiz[data-outcome='{outcome}']")
    assert page.evaluate("window.__sameDocument === true"), "the quiz reloaded the page"
    assert page.is_checked(f"form.quiz input[name=answer][value='{answer}']")


@pytest.mark.parametrize("locale", ["en", "es", "de", "tr"])
def test_learner_journey(browser: "Browser", server: str, artifacts: Path, locale: str) -> None:
    lesson_text = texts(locale)
    quiz_text = lesson_text["sections"][QUIZ["id"]]
    exercise_text = lesson_text["exercises"][EXERCISE]
    lesson_url = f"{server}/{locale}/lessons/{LESSON}"
    email = f"journey-{locale}-{uuid.uuid4().hex[:8]}@example.com"
    context, page, watch = _open(browser)

    # 1. an anonymous learner opens the lesson
    page.goto(lesson_url)
    assert page.locator("html").get_attribute("lang") == locale
    assert words(page.locator("h1").inner_text()) == words(lesson_text["title"])

    # 2. the quick check: wrong, then right
    wrong = (QUIZ["quiz"]["answer"] + 1) % QUIZ["quiz"]["options"]
    _answer_quiz(page, watch, wrong, "wrong")
    outcome = page.locator(".quiz-outcome")
    assert "wrong" in (outcome.get_attribute("class") or "")
    assert words(outcome.inner_text()) == gettext(locale, "Not quite. Try another answer.")
    _answer_quiz(page, watch, QUIZ["quiz"]["answer"], "correct")
    assert "correct" in (outcome.get_attribute("class") or "")
    assert outcome.locator("strong").first.inner_text() == gettext(locale, "Correct!")
    assert plain(markdown(quiz_text["explanation"])) in words(outcome.inner_text())
    # reading on to the recap marks the lesson read (static/js/progress.js)
    page.locator("section.section-recap").scroll_into_view_if_needed()
    assert _wait_for_progress(server, page, lambda s: s["read"])["lessons"][LESSON]["read"]

    # 7a. keyboard: the editor keeps Tab (it indents) and says so; Esc, then Tab, leaves it
    page.wait_for_selector(EDITOR)
    textarea = page.locator(f"{SECTION} textarea[name=code]")
    help_text = page.locator(f"{SECTION} .editor-help")
    assert help_text.is_visible()
    assert words(help_text.inner_text()) == words(gettext(locale, HELP))
    assert page.locator(CONTENT).get_attribute("aria-describedby") == help_text.get_attribute("id")
    starter = textarea.input_value()
    page.click(CONTENT)
    page.keyboard.press("Tab")
    assert _active_is(page, CONTENT), "Tab left the editor instead of indenting"
    assert textarea.input_value() != starter  # it indented
    page.keyboard.press("ControlOrMeta+z")
    assert textarea.input_value() == starter
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    assert _active_is(page, SUBMIT), "Esc, then Tab, did not reach the submit button"
    page.keyboard.press("Shift+Tab")
    assert _active_is(page, CONTENT), "Shift+Tab from the button did not return to the editor"

    # 3. a buggy loop typed into the editor, Ctrl+Enter, the diagnosis in place
    buggy = learner_code("unscaled.py")
    _set_code(page, buggy)
    assert textarea.input_value() == buggy  # the hidden textarea follows the editor
    page.keyboard.press("ControlOrMeta+Enter")
    result = page.locator(f"{SECTION} .result[data-status=failed]")
    result.wait_for(timeout=GRADING_TIMEOUT_MS)
    assert page.url.startswith(lesson_url)  # graded in place
    assert words(result.locator(".result-status").inner_text()) == _result_heading(
        locale, "Not yet right"
    )
    diagnosis = result.locator(".diagnosis[data-code=loss_not_scaled]")
    assert diagnosis.locator("h4").inner_text() == gettext(locale, "What went wrong")
    message = words(diagnosis.locator("p").first.inner_text())
    template = lesson_text["exercises"]["accumulate"]["diagnoses"]["loss_not_scaled"]
    found = diagnosis_pattern(words(template)).fullmatch(message)
    assert found, f"diagnosis {message!r} is not {template!r} filled in"
    ratio = float(found["ratio"].replace(",", "."))
    assert ratio == float(found["accum_steps"]) > 1  # unscaled: accum_steps times too large
    chart = diagnosis.locator(".weights-chart svg")
    assert chart.is_visible()
    box = chart.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 100
    chart_words = words(chart.text_content() or "")
    for label in ("Your loop", "Correct loop", "Micro-batch"):
        assert gettext(locale, label) in chart_words
    diagnosis.scroll_into_view_if_needed()
    result.screenshot(path=str(artifacts / f"{locale}-diagnosis.png"))

    # 4. hints, one at a time
    ladder = page.locator(f"#hints-{EXERCISE}")
    hints = ladder.locator("li.hint")
    button = ladder.locator("button.hint-next")
    count = len(exercise_text["hints"])
    assert hints.count() == count
    assert button.inner_text() == gettext(locale, "Show a hint")
    for shown in range(1, count + 1):
        button.click()
        assert [hints.nth(i).is_visible() for i in range(count)] == [
            i < shown for i in range(count)
        ]
        newest = hints.nth(shown - 1)
        assert words(newest.locator("p").inner_text()) == plain(
            markdown_inline(exercise_text["hints"][shown - 1])
        )
        assert page.evaluate("document.activeElement.classList.contains('hint')")
        if shown < count:
            assert button.inner_text() == gettext(locale, "Next hint")
    assert button.is_hidden()

    # 5. the fixed loop, submitted with the button: passed
    fixed = learner_code("canonical.py")
    _set_code(page, fixed)
    assert textarea.input_value() == fixed
    page.click(SUBMIT)
    passed = page.locator(f"{SECTION} .result[data-status=passed]")
    passed.wait_for(timeout=GRADING_TIMEOUT_MS)
    assert words(passed.locator(".result-status").inner_text()) == _result_heading(locale, "Passed")
    assert words(passed.locator(".score").inner_text()) == words(
        gettext(locale, "Score: %(score)s", score=format_share(1.0, locale))
    )
    assert passed.locator(".diagnosis").count() == 0
    assert passed.locator(".checks li.bad").count() == 0
    page.screenshot(path=str(artifacts / f"{locale}-passed-full.png"), full_page=True)
    watch.checkpoint()

    # 6. register: the anonymous work joins the account
    page.goto(f"{server}/{locale}/register")
    page.fill("#email", email)
    page.fill("#password", PASSWORD)
    watch.checkpoint()
    with page.expect_navigation():
        page.click("form.account-form button[type=submit]")
    assert page.url == f"{server}/{locale}/"
    assert email in page.locator(".account-email").inner_text()
    watch.assert_clean()
    context.close()

    # ... and a second browser logs in and finds it on the course page
    context, page, watch = _open(browser)
    page.goto(f"{server}/{locale}/login")
    page.fill("#email", email)
    page.fill("#password", PASSWORD)
    watch.checkpoint()
    with page.expect_navigation():
        page.click("form.account-form button[type=submit]")
    assert page.url == f"{server}/{locale}/"
    state = page.locator(f"p.lesson-state[data-lesson={LESSON}] small")
    assert [words(t) for t in state.all_inner_texts()] == [
        gettext(locale, "Read"),
        gettext(locale, "Quick check passed"),
        ngettext(
            locale,
            "%(passed)s of %(count)s exercise passed",
            "%(passed)s of %(count)s exercises passed",
            len(SPEC["exercises"]),
            passed=1,
            count=len(SPEC["exercises"]),
        ),
    ]
    link = page.locator("p.continue a")
    assert link.inner_text() == gettext(locale, "Continue where you left off")
    href = link.get_attribute("href") or ""
    at = re.fullmatch(rf"/{locale}/lessons/{LESSON}(?:#(?P<section>[\w-]+))?", href)
    assert at, f"'continue' points at {href!r}"
    assert at["section"] is None or at["section"] in SECTION_IDS
    page.screenshot(path=str(artifacts / f"{locale}-course.png"), full_page=True)
    watch.checkpoint()
    with page.expect_navigation():
        link.click()
    assert page.url.startswith(lesson_url)
    # the draft came along too: the editor holds the fixed loop, not the starter code
    page.locator(CONTENT, has_text="/ accum_steps").wait_for(timeout=5_000)
    assert page.locator(f"{SECTION} textarea[name=code]").input_value() == fixed
    watch.assert_clean()
    context.close()
