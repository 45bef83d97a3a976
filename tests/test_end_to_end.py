"""The whole path through real processes: `gradlab serve` (web + local worker), a browser-like
client submitting the lesson's form, the worker grading in bubblewrap, the result on the page."""

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import Served, csrf_token
from tests.pg import BOTH_DATABASES

CORPUS = Path(__file__).parent / "corpus" / "accumulate"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("served", BOTH_DATABASES, indirect=True),  # SQLite and PostgreSQL
]


def _submit_and_wait(browser: httpx.Client, locale: str, code: str) -> httpx.Response:
    response = browser.post(
        f"/{locale}/lessons/gradient-accumulation/exercises/accumulate",
        data={"code": code, "csrf_token": csrf_token(browser)},
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


def _workers(pid: int) -> list[int]:
    """Live `gradlab worker` children of `pid` (serve's web processes are children too),
    whichever of its threads started them."""
    children = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z" and _is_worker(int(entry)):
            children.append(int(entry))
    return children


def _is_worker(pid: int) -> bool:
    try:
        return b"\0worker\0" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_a_worker_killed_mid_job_is_replaced_and_the_job_finished(served: Served) -> None:
    """SIGKILL the local worker while it grades: `serve` starts a new one, which re-leases the
    job once the dead worker's lease (3 s here) expires, and the learner still gets a verdict."""
    with httpx.Client(base_url=served.url, timeout=30) as client:
        submitted = client.post(
            "/api/v1/submissions",
            json={
                "exercise": "gradient-accumulation/accumulate",
                "code": (CORPUS / "canonical.py").read_text(),
            },
        ).json()
        deadline = time.monotonic() + 30
        while client.get(submitted["url"]).json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (worker,) = _workers(served.process.pid)
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while (body := client.get(submitted["url"]).json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, "the job was never finished"
            time.sleep(0.3)
        assert body["status"] == "passed"
        (replacement,) = _workers(served.process.pid)
        assert replacement != worker
