"""A real browser (Debian's chromium driven by Playwright) on a real `gradlab serve`: the learner
reads the lesson, submits from the page with JavaScript on, and reads the verdict in place."""

import re
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "corpus" / "accumulate"
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("locale", "file", "status", "code"),
    [("en", "canonical.py", "passed", None), ("tr", "unscaled.py", "failed", "loss_not_scaled")],
)
def test_submit_from_the_lesson_page(
    browser, server: str, tmp_path: Path, locale: str, file: str, status: str, code: str | None
) -> None:  # type: ignore[no-untyped-def]
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server}/{locale}/lessons/gradient-accumulation")
    assert page.locator("html").get_attribute("lang") == locale
    textarea = page.locator("#exercise-accumulate textarea[name=code]")
    assert "optimizer.zero_grad()" in textarea.input_value()  # the starter code
    page.wait_for_selector(EDITOR)  # the editor took over the (now hidden) textarea
    _set_code(page, (CORPUS / file).read_text())
    assert textarea.input_value() == (CORPUS / file).read_text()
    page.click("#exercise-accumulate button[type=submit]")
    result = page.wait_for_selector(f".result[data-status={status}]", timeout=90_000)
    assert "/submissions/" not in page.url  # graded in place, no navigation
    if code:
        assert result.query_selector(f".diagnosis[data-code={code}]") is not None
    page.screenshot(path=str(tmp_path / f"{locale}-{status}.png"), full_page=True)
    assert errors == []
    page.close()


# --- the editor, drafts, hints, CSP and the phone layout ---------------------------------------

SHOTS = Path("/tmp/gradlab-shots")
LESSON_PATH = "/{locale}/lessons/gradient-accumulation"
EDITOR = "#exercise-accumulate .cm-editor"
CONTENT = "#exercise-accumulate .cm-content"
# Listens from the first byte: every CSP violation of the page lands in window.__csp.
CSP_LISTENER = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


def _page(browser, **options):  # type: ignore[no-untyped-def]
    context = browser.new_context(**options)
    context.add_init_script(CSP_LISTENER)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))
    page.on(
        "console",
        lambda msg: (
            problems.append(f"console: {msg.text}")
            if msg.type == "error" and "/api/v1/drafts/" not in msg.text  # no drafts API yet: 404
            else None
        ),
    )
    return context, page, problems


def _no_violations(page, problems: list[str]) -> None:  # type: ignore[no-untyped-def]
    assert page.evaluate("window.__csp") == []
    assert [p for p in problems if "Content Security Policy" in p or "pageerror" in p] == []


def _set_code(page, code: str) -> None:  # type: ignore[no-untyped-def]
    page.click(CONTENT)
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.press("Delete")
    # insertText: no auto-indent or bracket closing, the text arrives exactly as written
    page.keyboard.insert_text(code)


def test_editor_enhances_the_textarea_and_ctrl_enter_submits(browser) -> None:  # type: ignore[no-untyped-def]
    SHOTS.mkdir(exist_ok=True)
    context, page, problems = _page(browser)
    page.goto(f"{page_server()}{LESSON_PATH.format(locale='de')}")
    page.wait_for_selector(EDITOR)
    textarea = page.locator("#exercise-accumulate textarea[name=code]")
    assert textarea.is_hidden()
    # the editor is labelled by the form's label and highlights Python
    label_id = page.locator("#exercise-accumulate label[for=code-accumulate]").get_attribute("id")
    assert page.locator(CONTENT).get_attribute("aria-labelledby") == label_id
    assert page.locator(f"{CONTENT} .tok-keyword").count() > 0
    # CodeMirror's own <style> got in through the response's nonce
    assert page.evaluate("[...document.querySelectorAll('style')].every(s => s.nonce)")
    _set_code(page, (CORPUS / "unscaled.py").read_text())
    assert "/ accum_steps" not in textarea.input_value()  # the hidden textarea follows
    assert textarea.input_value() == (CORPUS / "unscaled.py").read_text()
    page.keyboard.press("ControlOrMeta+Enter")
    result = page.wait_for_selector(".result[data-status=failed]", timeout=90_000)
    assert result.query_selector(".diagnosis[data-code=loss_not_scaled] svg title") is not None
    assert result.query_selector(".weights-chart .visually-hidden table") is not None
    page.locator("#exercise-accumulate .weights-chart").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "de-feedback-chart.png"), full_page=False)
    page.locator("#exercise-accumulate").screenshot(path=str(SHOTS / "de-exercise.png"))
    _no_violations(page, problems)
    context.close()


def test_error_line_jumps_into_the_editor(browser) -> None:  # type: ignore[no-untyped-def]
    context, page, problems = _page(browser)
    page.goto(f"{page_server()}{LESSON_PATH.format(locale='en')}")
    page.wait_for_selector(EDITOR)
    _set_code(page, (CORPUS / "syntax_error.py").read_text())
    page.click("#exercise-accumulate button[type=submit]")
    page.wait_for_selector("#exercise-accumulate .result[data-status=error]", timeout=90_000)
    button = page.locator("#exercise-accumulate button.error-line")
    line = int(button.get_attribute("data-line") or 0)
    assert line > 0
    button.click()
    assert page.evaluate("document.activeElement.classList.contains('cm-content')")
    cursor_line = page.locator("#exercise-accumulate .cm-activeLineGutter").inner_text()
    assert int(cursor_line) == line
    _no_violations(page, problems)
    context.close()


def test_draft_survives_a_reload_and_resets_to_the_starter(browser) -> None:  # type: ignore[no-untyped-def]
    context, page, problems = _page(browser)
    url = f"{page_server()}{LESSON_PATH.format(locale='es')}"
    page.goto(url)
    page.wait_for_selector(EDITOR)
    starter = page.locator("#exercise-accumulate textarea[name=code]").input_value()
    reset = page.locator("#exercise-accumulate .reset-starter")
    assert reset.is_hidden()
    _set_code(page, "# my draft\nprint('hola')\n")
    status = page.locator("#exercise-accumulate .draft-status")
    status.filter(has_text=re.compile(r"\S")).wait_for(timeout=5_000)  # debounced save
    page.reload()
    page.wait_for_selector(EDITOR)
    page.locator(CONTENT, has_text="my draft").wait_for(timeout=5_000)
    textarea = page.locator("#exercise-accumulate textarea[name=code]")
    assert textarea.input_value() == "# my draft\nprint('hola')\n"
    assert reset.is_visible()
    reset.click()
    assert textarea.input_value() == starter
    assert reset.is_hidden()
    _no_violations(page, problems)
    context.close()


def test_hint_ladder_reveals_one_hint_at_a_time(browser) -> None:  # type: ignore[no-untyped-def]
    context, page, problems = _page(browser)
    page.goto(f"{page_server()}{LESSON_PATH.format(locale='tr')}")
    hints = page.locator("#hints-accumulate li.hint")
    button = page.locator("#hints-accumulate button.hint-next")
    assert hints.count() == 3
    assert [hints.nth(i).is_visible() for i in range(3)] == [False, False, False]
    first_label = button.inner_text()
    for shown in (1, 2, 3):
        button.click()
        assert [hints.nth(i).is_visible() for i in range(3)] == [i < shown for i in range(3)]
        assert page.evaluate("document.activeElement.classList.contains('hint')")
        if shown < 3:
            assert button.inner_text() != first_label  # "Next hint" from now on
    assert button.is_hidden()
    _no_violations(page, problems)
    context.close()


def test_hints_without_javascript_are_details(browser) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{page_server()}{LESSON_PATH.format(locale='en')}")
    assert page.locator("#exercise-accumulate textarea[name=code]").is_visible()
    assert page.locator("#hints-accumulate details").count() == 3
    assert page.locator("#hints-accumulate button.hint-next").is_hidden()
    context.close()


@pytest.mark.parametrize("locale", ["en", "tr"])
def test_phone_layout_has_no_horizontal_overflow(browser, locale: str) -> None:  # type: ignore[no-untyped-def]
    SHOTS.mkdir(exist_ok=True)
    context, page, problems = _page(
        browser, viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True
    )
    page.goto(f"{page_server()}{LESSON_PATH.format(locale=locale)}")
    page.wait_for_selector(EDITOR)
    _set_code(page, (CORPUS / "never_cleared.py").read_text())
    page.click("#exercise-accumulate button[type=submit]")
    page.wait_for_selector("#exercise-accumulate .result[data-status=failed]", timeout=90_000)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width}px wide on a 390px phone"
    wide = page.evaluate(
        """[...document.querySelectorAll('body *')].filter(e => {
             const r = e.getBoundingClientRect();
             return r.width > 0 && r.right > 391
               && !e.closest('.cm-scroller, pre, .visually-hidden');
           }).map(e => e.tagName + '.' + e.className).slice(0, 5)"""
    )
    assert wide == []
    page.screenshot(path=str(SHOTS / f"{locale}-phone.png"), full_page=True)
    _no_violations(page, problems)
    context.close()


_SERVER: list[str] = []


@pytest.fixture(autouse=True)
def _remember_server(request: pytest.FixtureRequest) -> None:
    if "browser" in request.fixturenames:
        _SERVER[:] = [request.getfixturevalue("server")]


def page_server() -> str:
    return _SERVER[0]


def test_api_docs_render_under_the_sites_policy(browser) -> None:  # type: ignore[no-untyped-def]
    """/docs is Swagger UI from the site's own files: it renders, with no CSP violation."""
    context, page, problems = _page(browser)
    page.goto(f"{page_server()}/docs")
    title = page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
    assert title is not None and "gradlab" in title.inner_text()
    page.wait_for_selector(".opblock-summary-path[data-path='/api/v1/submissions']")
    _no_violations(page, problems)
    context.close()
