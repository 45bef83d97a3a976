"""A real browser (Debian's chromium driven by Playwright) on a real `gradlab serve`: the learner
reads the lesson, submits from the page with JavaScript on, and reads the verdict in place."""

import shutil
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "corpus" / "accumulate"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser():  # type: ignore[no-untyped-def]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


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
    textarea.fill((CORPUS / file).read_text())
    page.click("#exercise-accumulate button[type=submit]")
    result = page.wait_for_selector(f".result[data-status={status}]", timeout=90_000)
    assert "/submissions/" not in page.url  # graded in place, no navigation
    if code:
        assert result.query_selector(f".diagnosis[data-code={code}]") is not None
    page.screenshot(path=str(tmp_path / f"{locale}-{status}.png"), full_page=True)
    assert errors == []
    page.close()
