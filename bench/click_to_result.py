"""Click to result in a real browser (issue 13): how long a learner waits, on the lesson page,
between "Run and grade" and the verdict in place, for `accumulate`'s correct solution.

One `gradlab serve --workers 1` (SQLite, warm pool) and Debian's chromium driven by Playwright.
The first grade warms the worker up and is not counted; then `--runs` submissions, each timed
from the click to the `.result[data-status=passed]` element. Printed with the worker's own grade
time (`timings.total_s` of the results) side by side, so the gap is what the page, the HTTP
round trips and the queue add.

Usage: .venv/bin/python bench/click_to_result.py [--runs 10]
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
CANONICAL = (ROOT / "tests" / "corpus" / "accumulate" / "canonical.py").read_text()
LESSON = "/en/lessons/gradient-accumulation"
FORM = "#exercise-accumulate"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="gradlab-click-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADLAB_")}
    env.update(GRADLAB_DATA_DIR=str(data), GRADLAB_DEVICE="cpu")
    log = (data / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "gradlab.cli", "serve", "--port", str(port), "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            sys.exit(f"serve did not become healthy: {(data / 'serve.log').read_text()[-2000:]}")
        measure(url, args.runs)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        log.close()


def measure(url: str, runs: int) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(f"{url}{LESSON}")
        page.wait_for_selector(f"{FORM} .cm-editor")
        page.click(f"{FORM} .cm-content")  # typed into the editor, as a learner would
        page.keyboard.press("ControlOrMeta+a")
        page.keyboard.press("Delete")
        page.keyboard.insert_text(CANONICAL)
        clicks: list[float] = []
        grades: list[float] = []
        looks: list[str] = []
        page.on("request", lambda r: looks.append(r.url) if "fragment=1" in r.url else None)
        for run in range(runs + 1):
            page.evaluate(
                "document.querySelector('#exercise-accumulate .result-slot').innerHTML = ''"
            )
            before = len(looks)
            started = time.monotonic()
            page.click(f"{FORM} button[type=submit]")
            page.wait_for_selector(f"{FORM} .result[data-status=passed]", timeout=120_000)
            took = time.monotonic() - started
            submission = looks[before].split("/submissions/")[1].split("?")[0]
            cookies = {c["name"]: c["value"] for c in page.context.cookies()}
            body = httpx.get(f"{url}/api/v1/submissions/{submission}", cookies=cookies).json()
            if run == 0:
                print(f"warm-up (a fresh worker): {took:.3f} s")
                continue
            clicks.append(took)
            grades.append(body["result"]["timings"]["total_s"])
        browser.close()
    print(f"runs: {runs}, accumulate's correct solution, one worker, this machine")
    print(
        f"click to result: median {statistics.median(clicks):.3f} s, "
        f"min {min(clicks):.3f} s, max {max(clicks):.3f} s"
    )
    print(
        f"the worker's own time (job created to graded): median {statistics.median(grades):.3f} s"
    )
    print(f"ratio click / worker: {statistics.median(clicks) / statistics.median(grades):.2f}")


if __name__ == "__main__":
    main()
