"""The whole path through real processes: `gradlab serve` (web + local worker), a browser-like
client submitting the lesson's form, the worker grading in bubblewrap, the result on the page."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gradlab.config import PROJECT_ROOT

CORPUS = Path(__file__).parent / "corpus" / "accumulate"
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("serve-data")
    port = _free_port()
    env = {**os.environ, "GRADLAB_DATA_DIR": str(data_dir), "GRADLAB_POLL_INTERVAL_S": "0.1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "gradlab.cli", "serve", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/en/", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"server did not start: {process.stdout.read().decode()[-3000:]}")
    yield base
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("gradlab serve did not stop on SIGINT")
    assert (data_dir / "gradlab.db").exists()


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
