"""The whole path through real processes: `gradlab serve` (web + local worker), a browser-like
client submitting the lesson's form, the worker grading in bubblewrap, the result on the page."""

import time
from pathlib import Path

import httpx
import pytest

CORPUS = Path(__file__).parent / "corpus" / "accumulate"
pytestmark = pytest.mark.slow


def _submit_and_wait(browser: httpx.Client, locale: str, code: str) -> httpx.Response:
    response = browser.post(
        f"/{locale}/lessons/gradient-accumulation/exercises/accumulate", data={"code": code}
    )
    assert response.status_code == 200 and "/submissions/" in str(response.url)
    deadline = time.monotonic() + 90
    while response.headers["x-gradlab-status"] in ("queued", "running"):
        assert time.monotonic() < deadline, "no result within 90 s"
        time.sleep(0.3)
        response = browser.get(response.url)
    return response


def test_learner_submits_from_the_page_and_sees_the_verdict(server: str) -> None:
    with httpx.Client(base_url=server, follow_redirects=True, timeout=30) as browser:
        lesson = browser.get("/en/lessons/gradient-accumulation")
        assert 'name="code"' in lesson.text
        page = _submit_and_wait(browser, "en", (CORPUS / "canonical.py").read_text())
        assert 'data-status="passed"' in page.text

        page = _submit_and_wait(browser, "de", (CORPUS / "unscaled.py").read_text())
        assert 'data-status="failed"' in page.text
        assert 'data-code="loss_not_scaled"' in page.text
        assert "accum_steps" in page.text and "Was schiefging" in page.text


def test_grader_api_waits_for_the_result(server: str) -> None:
    with httpx.Client(base_url=server, timeout=60) as grader:
        response = grader.post(
            "/api/v1/submissions?wait=50",
            json={
                "exercise": "gradient-accumulation/accumulate",
                "code": (CORPUS / "syntax_error.py").read_text(),
                "locale": "es",
            },
        )
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        assert result["status"] == "error" and result["error"]["kind"] == "syntax_error"
        assert result["error"]["line"] == 4 and result["locale"] == "es"
        assert result["timings"]["queued_s"] >= 0 and result["timings"]["total_s"] > 0
