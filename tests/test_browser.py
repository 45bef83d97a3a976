"""A real browser (Debian's chromium driven by Playwright) on a real `gradlab serve`: the learner
reads the lesson, submits from the page with JavaScript on, and reads the verdict in place."""

import json
import re
import time
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
    looks: list[str] = []
    page.on("request", lambda r: looks.append(r.url) if "fragment=1" in r.url else None)
    clicked = time.monotonic()
    page.click("#exercise-accumulate button[type=submit]")
    result = page.wait_for_selector(f".result[data-status={status}]", timeout=90_000)
    print(f"\n[{locale} {file}] click to result: {time.monotonic() - clicked:.3f} s, {looks}")
    assert "/submissions/" not in page.url  # graded in place, no navigation
    # the form post's answer shows the queued job; then each look is held by the server until
    # the verdict (app/routes/pages.py, `until=done`): one for a quick grade, a second when the
    # job ran long enough to be shown running
    assert 1 <= len(looks) <= 2 and all("until=done" in url for url in looks), looks
    if code:
        assert result.query_selector(f".diagnosis[data-code={code}]") is not None
    badge = page.locator("#exercise-accumulate .exercise-passed")
    assert badge.is_visible() == (status == "passed")
    if status == "passed":  # and on the next visit, from the learner's progress
        page.reload()
        badge.wait_for(state="visible", timeout=10_000)
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
    with page.expect_response(
        lambda r: "/api/v1/drafts/" in r.url and r.request.method == "DELETE", timeout=10_000
    ) as deleted:
        reset.click()  # back to the starter: the draft is deleted, not saved as a copy of it
    assert deleted.value.status == 204
    assert textarea.input_value() == starter
    assert reset.is_hidden()
    # the same learner in English gets the English starter, not the Spanish one "restored"
    page.goto(f"{page_server()}{LESSON_PATH.format(locale='en')}")
    page.wait_for_selector(EDITOR)
    english = page.locator("#exercise-accumulate textarea[name=code]").input_value()
    assert english != starter and reset.is_hidden()
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


HINTS_API = "/api/v1/progress/hints"
REPORT_HINT_1 = """async () => {
  const meta = document.querySelector('meta[name="csrf-token"]');
  const answer = await fetch("/api/v1/progress/hints", {
    method: "POST",
    headers: {"Content-Type": "application/json", "X-CSRF-Token": meta ? meta.content : ""},
    body: JSON.stringify({exercise: "gradient-accumulation/accumulate", hint: 1}),
  });
  return answer.json();
}"""


def test_opened_hints_reach_the_server(browser) -> None:  # type: ignore[no-untyped-def]
    """static/js/hints.js reports each hint shown; the server keeps them for this learner (it
    answers the highest stored); a page without hints sends nothing."""
    context, page, problems = _page(browser)
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.endswith(HINTS_API) else None)
    assert page.goto(f"{page_server()}/en/").ok  # the course page: no hint ladder
    page.wait_for_load_state("load")
    assert sent == []  # hints.js is on every page, and idle where there is no hint ladder
    page.goto(f"{page_server()}{LESSON_PATH.format(locale='en')}")
    button = page.locator("#hints-accumulate button.hint-next")
    for shown in (1, 2):
        with page.expect_response(lambda r: r.url.endswith(HINTS_API)) as answer:
            button.click()
        assert answer.value.status == 200
        assert answer.value.json() == {
            "exercise": "gradient-accumulation/accumulate",
            "hints_opened": shown,
        }
    assert page.evaluate(REPORT_HINT_1)["hints_opened"] == 2  # stored: read back, not echoed
    assert len(sent) == 3
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


LOCALES = ("en", "es", "de", "tr")
# One quick submission (it fails to compile), so that the result page exists in every locale.
SUBMIT = """async () => {
  const token = document.querySelector("meta[name=csrf-token]").content;
  const response = await fetch("/en/lessons/gradient-accumulation/exercises/accumulate", {
    method: "POST", headers: {"Accept": "application/json", "X-CSRF-Token": token},
    body: new URLSearchParams({code: "def broken(:\\n", csrf_token: token}),
  });
  return (await response.json()).id;
}"""
STATUS = """async (id) => {
  const response = await fetch(`/en/submissions/${id}?fragment=1`);
  return response.headers.get("X-Gradlab-Status");
}"""
# The elements that stick out past the viewport's right edge (scrolling boxes contain theirs).
STICKING_OUT = """(limit) => [...document.querySelectorAll("body *")].filter(e => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.right > limit + 1
      && !e.closest(".cm-scroller, pre, .table-scroll, .visually-hidden");
  }).map(e => `${e.tagName}.${e.className}: ${Math.round(r.right)}px`).slice(0, 3)"""


def test_no_page_is_wider_than_a_phone_in_any_locale(browser, content) -> None:  # type: ignore[no-untyped-def]
    """Every kind of page, in every locale, fits a 390 px phone: nothing scrolls sideways but
    the code blocks and tables that scroll inside their own box."""
    context, page, problems = _page(browser, viewport={"width": 390, "height": 844}, is_mobile=True)
    server = page_server()
    page.goto(f"{server}/en/login")
    submission = page.evaluate(SUBMIT)  # graded while the other pages are measured
    lessons = [entry.id for entry in content.lesson_list("en") if entry.available]
    assert len(lessons) == 4
    paths = ["/", *(f"/lessons/{lesson}" for lesson in lessons), "/authoring/translations"]
    paths += ["/login", "/no-such-page"]  # /register: the login page's layout
    too_wide = {}

    def measure(url: str) -> None:
        page.goto(f"{server}{url}", wait_until="domcontentloaded")  # deferred scripts have run
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > 390:
            too_wide[url] = (width, page.evaluate(STICKING_OUT, 390))

    for path in paths:
        for locale in LOCALES:
            measure(f"/{locale}{path}")
    # the result page last, once graded (a pending one reloads itself every 2 s)
    deadline = time.monotonic() + 90
    while page.evaluate(STATUS, submission) in ("queued", "running"):
        assert time.monotonic() < deadline, "the submission was not graded in 90 s"
        time.sleep(0.25)
    for locale in LOCALES:
        measure(f"/{locale}/submissions/{submission}")
    assert too_wide == {}
    assert page.locator(".result[data-status=error] pre.output").count() == 1
    page.goto(f"{server}{LESSON_PATH.format(locale='de')}", wait_until="domcontentloaded")
    assert page.locator(EDITOR).is_visible()  # the measured lesson pages had their editor
    _no_violations(page, problems)
    context.close()


def _luminance(css_color: str) -> float:
    """WCAG relative luminance of a computed `rgb(r, g, b)` colour."""
    channels = [int(c) / 255 for c in re.findall(r"\d+", css_color)[:3]]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


COLOURS = """() => {
  const style = (selector) => getComputedStyle(document.querySelector(selector));
  return {
    body: style("body").backgroundColor, text: style("body").color, link: style("main a").color,
    editor: style("#exercise-accumulate .cm-editor").backgroundColor,
    code: style("pre.code").backgroundColor, codeText: style("pre.code").color,
  };
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_page_follows_the_colour_scheme(browser, scheme: str) -> None:  # type: ignore[no-untyped-def]
    """The whole page, its code blocks and the editor are dark together or light together, and
    body text keeps a readable contrast (WCAG AA: 4.5:1)."""
    context, page, problems = _page(browser, color_scheme=scheme)
    page.goto(f"{page_server()}{LESSON_PATH.format(locale='es')}")
    page.wait_for_selector(EDITOR)
    colours = page.evaluate(COLOURS)
    backgrounds = [_luminance(colours[key]) for key in ("body", "editor", "code")]
    texts = [_luminance(colours[key]) for key in ("text", "link", "codeText")]
    if scheme == "dark":
        assert max(backgrounds) < 0.05, colours
        assert min(texts) > 0.3, colours
    else:
        assert min(backgrounds) > 0.8, colours
        assert max(texts) < 0.2, colours
    for text in texts:
        for background in backgrounds:
            hi, lo = sorted((text, background), reverse=True)
            assert (hi + 0.05) / (lo + 0.05) >= 4.5, colours
    _no_violations(page, problems)
    context.close()


def test_translation_status_uses_the_main_column_and_titles(browser, content) -> None:  # type: ignore[no-untyped-def]
    """On a desktop the status table and the stamp command sit in the page's main column (not
    the 16rem sidebar column), the page does not scroll sideways, and lessons go by title."""
    context, page, problems = _page(browser, viewport={"width": 1280, "height": 900})
    page.goto(f"{page_server()}/de/authoring/translations")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    table = page.locator("table.translation-status").bounding_box()
    command = page.locator("main pre", has_text="gradlab lessons stamp").bounding_box()
    assert table is not None and command is not None
    assert table["width"] > 600 and command["width"] > 600
    assert command["x"] + command["width"] <= 1280
    titles = page.locator("table.translation-status tbody th").all_inner_texts()
    lessons = [entry for entry in content.lesson_list("de") if entry.available]
    assert [t.splitlines()[0].strip() for t in titles] == [entry.title for entry in lessons]
    assert all(entry.id in t for entry, t in zip(lessons, titles, strict=True))  # id: secondary
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


PROFILING = Path(__file__).parent / "corpus" / "find-the-bottleneck"
SUBMIT_TO = """async ([path, code]) => {
  const token = document.querySelector("meta[name=csrf-token]").content;
  const response = await fetch(path, {
    method: "POST", headers: {"Accept": "application/json", "X-CSRF-Token": token},
    body: new URLSearchParams({code, csrf_token: token}),
  });
  return (await response.json()).id;
}"""
# Each non-empty line of a <pre> (one text node): its line boxes, width and top, as laid out.
PRE_LINES = """(pre) => {
  const node = pre.firstChild, range = document.createRange(), lines = [];
  let start = 0, number = 0;
  for (const text of node.data.split("\\n")) {
    if (text.trim()) {
      range.setStart(node, start);
      range.setEnd(node, start + text.length);
      const box = range.getBoundingClientRect();
      lines.push({boxes: range.getClientRects().length, width: box.width, top: box.top,
                  height: box.height, number, text});
    }
    start += text.length + 1;
    number += 1;
  }
  const style = getComputedStyle(pre);
  return {whiteSpace: style.whiteSpace, lineHeight: parseFloat(style.lineHeight),
          clientWidth: pre.clientWidth, scrollWidth: pre.scrollWidth,
          nodes: pre.childNodes.length, lines};
}"""


def test_the_profiler_table_keeps_one_line_per_row(browser) -> None:  # type: ignore[no-untyped-def]
    """Lesson 3's exercise is reading the profiler table: on a 1280 px result page a solution
    that prints it shows it once, no profiler log under "errors and warnings", and every row
    on one line of its own (wider than the box, which scrolls sideways instead)."""
    SHOTS.mkdir(exist_ok=True)
    context, page, problems = _page(browser, viewport={"width": 1280, "height": 900})
    server = page_server()
    page.goto(f"{server}/en/login")
    path = "/en/lessons/profiling/exercises/find-the-bottleneck"
    code = (PROFILING / "profiled_then_fixed.py").read_text()
    submission = page.evaluate(SUBMIT_TO, [path, code])
    deadline = time.monotonic() + 90
    while page.evaluate(STATUS, submission) in ("queued", "running"):
        assert time.monotonic() < deadline, "the submission was not graded in 90 s"
        time.sleep(0.25)
    page.goto(f"{server}/en/submissions/{submission}")
    outputs = page.locator(".result[data-status=passed] pre.output")
    assert outputs.count() == 1  # stdout only: the profiler's start-up lines are not stderr
    measured = outputs.first.evaluate(PRE_LINES)
    table = "\n".join(line["text"] for line in measured["lines"])
    assert measured["nodes"] == 1 and table.count("Self CPU %") == 1, table
    assert measured["whiteSpace"] == "pre"
    lines = measured["lines"]
    rows = [line for line in lines if "load_batch" in line["text"] or line["text"].startswith("-")]
    assert rows and max(line["width"] for line in rows) > measured["clientWidth"]
    assert measured["scrollWidth"] > measured["clientWidth"]  # the box scrolls, rows stay whole
    assert all(line["boxes"] == 1 for line in lines), lines  # no row broke into two boxes
    pitch, first = measured["lineHeight"], lines[0]
    assert pitch > 0, measured  # a length, not "normal"
    for line in lines:  # line n of the text is line n of the box: no row took two
        below = line["top"] - first["top"]
        assert abs(below - (line["number"] - first["number"]) * pitch) < 1, (line, pitch)
    page.screenshot(path=str(SHOTS / "profiler-table-1280.png"))
    _no_violations(page, problems)
    context.close()


# --- the quick check and refused submissions, worded in the page's language --------------------

QUIZ = "form.quiz"


def _quiz_key(content) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(the right option, a wrong one) of lesson 2's quick check."""
    sections = content.lessons["gradient-accumulation"].spec.sections
    quiz = next(section.quiz for section in sections if section.quiz is not None)
    return quiz.answer, (quiz.answer + 1) % quiz.options


def test_the_quiz_answers_in_place_and_keeps_the_choice(browser, content) -> None:  # type: ignore[no-untyped-def]
    from app.i18n import translations

    es = translations("es")
    right, wrong = _quiz_key(content)
    context, page, problems = _page(browser)
    url = f"{page_server()}{LESSON_PATH.format(locale='es')}"
    page.goto(url)
    page.evaluate("window.__stayed = true")  # a reload or a navigation would drop it
    page.check(f"{QUIZ} input[name=answer][value='{wrong}']")
    page.click(f"{QUIZ} button[type=submit]")
    outcome = page.wait_for_selector(".quiz-feedback .quiz-outcome.wrong", timeout=10_000)
    assert page.evaluate("window.__stayed") is True and page.url == url
    assert page.locator(f"{QUIZ} input[name=answer][value='{wrong}']").is_checked()
    assert es.gettext("Not quite. Try another answer.") in outcome.inner_text()
    assert es.gettext("Not quite. Try another answer.") != "Not quite. Try another answer."
    page.check(f"{QUIZ} input[name=answer][value='{right}']")
    page.click(f"{QUIZ} button[type=submit]")
    outcome = page.wait_for_selector(".quiz-feedback .quiz-outcome.correct", timeout=10_000)
    assert page.evaluate("window.__stayed") is True and page.url == url
    assert page.locator(f"{QUIZ} input[name=answer][value='{right}']").is_checked()
    assert page.locator(".quiz-feedback .quiz-outcome").count() == 1  # replaced, not added
    assert es.gettext("Correct!") in outcome.inner_text()
    assert outcome.query_selector("strong + p, p + p") is not None  # the explanation
    _no_violations(page, problems)
    context.close()
    # without JavaScript the form posts and the lesson comes back with the outcome
    plain = browser.new_context(java_script_enabled=False)
    page = plain.new_page()
    page.goto(url)
    page.check(f"{QUIZ} input[name=answer][value='{wrong}']")
    page.click(f"{QUIZ} button[type=submit]")
    page.wait_for_url("**?quiz=wrong*")
    assert (
        es.gettext("Not quite. Try another answer.") in page.locator(".quiz-outcome").inner_text()
    )
    plain.close()


def test_a_refused_submission_is_worded_by_the_page(browser) -> None:  # type: ignore[no-untyped-def]
    """A 429 or 503 (the shapes app/routes/pages.py and app/main.py answer, with Retry-After)
    is shown in the page's language with when to try again, never as the API's English."""
    from app.i18n import translations

    de = translations("de")
    refusals = [  # (status, Retry-After, body)
        (429, "17", {"detail": "too many requests; try again in 17 s"}),
        (503, "1", {"detail": "the grading queue is full", "reason": "queue_full"}),
        (503, "240", {"detail": "the server is busy (every database slot is taken)"}),
    ]
    seconds = ("Try again in %(n)s second.", "Try again in %(n)s seconds.")
    minutes = ("Try again in %(n)s minute.", "Try again in %(n)s minutes.")
    expected = [
        f"{de.gettext('You have sent your code many times in a short while.')} "
        + de.ngettext(*seconds, 17) % {"n": 17},
        f"{de.gettext('The grading queue is full right now.')} "
        + de.ngettext(*seconds, 1) % {"n": 1},
        f"{de.gettext('The server is busy right now.')} " + de.ngettext(*minutes, 4) % {"n": 4},
    ]
    assert "Versuch" in expected[0] and "Sekunden" in expected[0]  # the catalog has them
    context, page, problems = _page(browser)
    page.goto(f"{page_server()}{LESSON_PATH.format(locale='de')}")
    page.wait_for_selector(EDITOR)

    def refuse(route) -> None:  # type: ignore[no-untyped-def]
        status, retry_after, body = refusals.pop(0)
        route.fulfill(
            status=status,
            headers={"Retry-After": retry_after, "Content-Type": "application/json"},
            body=json.dumps(body),
        )

    page.route("**/exercises/accumulate", refuse)
    slot = page.locator("#exercise-accumulate .result-slot")
    for text in expected:
        page.click("#exercise-accumulate button[type=submit]")
        slot.locator(".refusal", has_text=text).wait_for(timeout=10_000)
        shown = slot.inner_text()
        assert shown.startswith(de.gettext("Your code was not sent")), shown
        assert "try again" not in shown and "busy" not in shown, shown
    assert refusals == []
    _no_violations(page, problems)
    context.close()
