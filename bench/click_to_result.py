"""Click to result in a real browser (issue 13): how long a learner waits, on the lesson page,
between "Run and grade" and the verdict in place, for `accumulate`'s correct solution.

One `gradlab serve --workers 1` (SQLite, warm pool, JSON logs) and Debian's chromium driven by
Playwright. The first grade warms the worker up and is not counted; then `--runs` submissions,
each timed from the click to the `.result[data-status=passed]` element. Where the time goes, per
run, from three clocks of the same machine (epoch seconds, so they line up):

- the browser: performance marks made by a script injected before the page's own (the click,
  each fetch sent and answered with its `X-Gradlab-Status`, the verdict in the DOM);
- the server's access log (`event=request`, `ms`): how long it took to answer each request;
- the database: the submission's `created_at`, the job's `started_at` (claimed) and the
  submission's `finished_at` (graded), next to the worker's own `timings.total_s`.

Usage: .venv/bin/python bench/click_to_result.py [--runs 10]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
CANONICAL = (ROOT / "tests" / "corpus" / "accumulate" / "canonical.py").read_text()
LESSON = "/en/lessons/gradient-accumulation"
FORM = "#exercise-accumulate"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Performance marks, made before the page's scripts run: `detail` carries what was seen.
MARKS = """
(() => {
  const mark = (name, detail) => performance.mark(name, { detail });
  const fetched = window.fetch;
  window.fetch = async (input, init) => {
    const url = String((input && input.url) || input);
    mark("bench:fetch", { url });
    const response = await fetched(input, init);
    mark("bench:answered", { url, status: response.status,
                             job: response.headers.get("X-Gradlab-Status") });
    return response;
  };
  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest("button[type=submit]");
    if (button) mark("bench:click", {});
  }, true);
  new MutationObserver(() => {
    const done = document.querySelector("#exercise-accumulate .result[data-status=passed]");
    if (done && !done.dataset.benchSeen) { done.dataset.benchSeen = "1"; mark("bench:shown", {}); }
  }).observe(document, { subtree: true, childList: true });
})();
"""
READ_MARKS = """() => performance.getEntriesByType("mark").filter(m => m.name.startsWith("bench:"))
  .map(m => ({ name: m.name, t: (performance.timeOrigin + m.startTime) / 1000, ...m.detail }))"""


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
    env.update(GRADLAB_DATA_DIR=str(data), GRADLAB_DEVICE="cpu", GRADLAB_LOG_FORMAT="json")
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
        runs = measure(url, args.runs)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        log.close()
    report(runs, data)


def one_run(page: Page, url: str) -> dict[str, Any]:
    """Submit once; the marks of this run and the submission's id."""
    page.evaluate("performance.clearMarks()")
    page.evaluate(f"document.querySelector('{FORM} .result-slot').innerHTML = ''")
    page.click(f"{FORM} button[type=submit]")
    page.wait_for_selector(f"{FORM} .result[data-status=passed]", timeout=120_000)
    marks = page.evaluate(READ_MARKS)
    for _ in range(50):  # the shown mark is made by an observer, just after the DOM change
        if any(m["name"] == "bench:shown" for m in marks):
            break
        time.sleep(0.01)
        marks = page.evaluate(READ_MARKS)
    looks = [m for m in marks if m["name"] == "bench:fetch" and "fragment=1" in m["url"]]
    submission = looks[0]["url"].split("/submissions/")[1].split("?")[0]
    return {"id": submission, "marks": marks}


def measure(url: str, runs: int) -> list[dict[str, Any]]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context()
        context.add_init_script(MARKS)
        page = context.new_page()
        page.goto(f"{url}{LESSON}")
        page.wait_for_selector(f"{FORM} .cm-editor")
        page.click(f"{FORM} .cm-content")  # typed into the editor, as a learner would
        page.keyboard.press("ControlOrMeta+a")
        page.keyboard.press("Delete")
        page.keyboard.insert_text(CANONICAL)
        page.wait_for_timeout(1500)  # the draft's autosave, off the measured clicks
        results = []
        for run in range(runs + 1):
            started = time.monotonic()
            measured = one_run(page, url)
            if run == 0:
                print(f"warm-up (a fresh worker): {time.monotonic() - started:.3f} s")
                continue
            cookies = {c["name"]: c["value"] for c in context.cookies()}
            body = httpx.get(f"{url}/api/v1/submissions/{measured['id']}", cookies=cookies).json()
            measured["total_s"] = body["result"]["timings"]["total_s"]
            results.append(measured)
        browser.close()
    return results


def server_times(data: Path) -> dict[str, list[float]]:
    """Access log `ms` per path (fragment looks by submission id; the form post by its path)."""
    times: dict[str, list[float]] = {}
    for line in (data / "serve.log").read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "request":
            times.setdefault(f"{entry['method']} {entry['path']}", []).append(entry["ms"])
    return times


def breakdown(run: dict[str, Any], db: sqlite3.Connection, posts_ms: list[float]) -> dict:
    marks = run["marks"]
    at = {m["name"]: m["t"] for m in marks if m["name"] in ("bench:click", "bench:shown")}
    click = at["bench:click"]
    answers = [m for m in marks if m["name"] == "bench:answered"]
    post = next(m for m in answers if "/exercises/" in m["url"])
    looks = [m for m in answers if "fragment=1" in m["url"]]
    created, claimed, graded = db.execute(
        "SELECT submission.created_at, job.started_at, submission.finished_at FROM submission "
        "JOIN job ON job.submission_id = submission.id WHERE submission.id = ?",
        (run["id"],),
    ).fetchone()
    delivered = next(m["t"] for m in looks if m["job"] == "passed")
    return {
        "click_s": at["bench:shown"] - click,
        "post_s": post["t"] - click,  # click -> the form post answered
        "post_server_ms": posts_ms.pop(0) if posts_ms else float("nan"),
        "created_s": created - click,  # the submission row's timestamp
        "claim_s": claimed - created,  # queued until a worker leased the job
        "grade_s": graded - claimed,  # the worker: sandbox phases, judging
        "deliver_s": delivered - graded,  # result stored -> the look carrying it answered
        "render_s": at["bench:shown"] - delivered,  # that answer -> verdict in the DOM
        "looks": [m["job"] for m in looks],
        "total_s": run["total_s"],
    }


def report(runs: list[dict[str, Any]], data: Path) -> None:
    times = server_times(data)
    posts = times.get("POST /en/lessons/gradient-accumulation/exercises/accumulate", [])
    posts = posts[-len(runs) :]  # the warm-up's first
    with sqlite3.connect(data / "gradlab.db") as db:
        rows = [breakdown(run, db, posts) for run in runs]
    for run, row in zip(runs, rows, strict=True):
        row["look_ms"] = times.get(f"GET /en/submissions/{run['id']}", [])
    med = lambda key: statistics.median(row[key] for row in rows)  # noqa: E731
    clicks = [row["click_s"] for row in rows]
    print(f"runs: {len(rows)}, accumulate's correct solution, one worker, this machine")
    print(
        f"click to result: median {statistics.median(clicks):.3f} s, "
        f"min {min(clicks):.3f} s, max {max(clicks):.3f} s"
    )
    print(f"the worker's own time (job created to graded): median {med('total_s'):.3f} s")
    print(f"ratio click / worker: {statistics.median(clicks) / med('total_s'):.2f}")
    print("where the time goes (medians):")
    print(f"  click -> form post answered     {med('post_s') * 1000:7.1f} ms "
          f"(server {med('post_server_ms'):.1f} ms)")  # fmt: skip
    print(f"  click -> submission row created {med('created_s') * 1000:7.1f} ms")
    print(f"  created -> claimed by a worker  {med('claim_s') * 1000:7.1f} ms")
    print(f"  claimed -> graded (stored)      {med('grade_s') * 1000:7.1f} ms")
    print(f"  graded -> look answered         {med('deliver_s') * 1000:7.1f} ms")
    print(f"  look answered -> in the DOM     {med('render_s') * 1000:7.1f} ms")
    looks = [len(row["looks"]) for row in rows]
    print(f"  fragment looks per result: median {statistics.median(looks):g}, max {max(looks)}")
    for row in rows:
        print(
            f"    {row['click_s']:.3f} s  post {row['post_s'] * 1000:5.0f}  "
            f"claim {row['claim_s'] * 1000:4.0f}  grade {row['grade_s'] * 1000:4.0f}  "
            f"deliver {row['deliver_s'] * 1000:4.0f}  render {row['render_s'] * 1000:3.0f}  "
            f"looks {'/'.join(row['looks'])} ({' '.join(f'{ms:.0f}' for ms in row['look_ms'])} ms)"
        )


if __name__ == "__main__":
    main()
