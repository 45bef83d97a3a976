"""Hostile traffic on one machine, loopback only, bounded (issue 12): does the service answer
overload, keep honest learners' results coming, and come back?

One `gradlab serve --workers N` (SQLite, a fresh data dir). Ten client addresses (127.0.0.2-11,
each socket bound to its own loopback address; all of 127/8 is the loopback interface): one
floods, the nine others are honest. The flooder sends `--endless` endless loops and as many
correct solutions as it is allowed; the honest addresses send a mix of the corpus (correct and
wrong solutions, syntax errors), each submission from a new anonymous learner (no cookie), all
through `--clients` concurrent connections. `--pollers` threads poll the accepted submissions
every 2 s until graded; a watcher asks /healthz every 0.25 s. Each endless loop runs for the
exercise's own wall clock (its lesson's `limits.wall_s`) unless `--wall` caps it
(GRADLAB_MAX_WALL_S).

Printed: answers by status (5xx must be 0), the slowest answer to a submission (as the generator
saw it, and by the server's own request log: on one machine the generator's threads wait for
the same two cores), honest correct submissions' time to result (submission to graded,
p50/max), /healthz's slowest answer during the load, accepted submissions never graded (lost)
and graded twice (duplicated: more than one job row or attempt), and how long after the load
the server answered a page and /healthz normally again.

On `--database postgresql` the server runs on a throwaway PostgreSQL server (bench/api_load.py's,
fsync off), as a scaled-out deployment would, instead of the default SQLite file.

Usage: .venv/bin/python bench/overload.py [--jobs 300] [--endless 30] [--workers 3]
       [--clients 100] [--pollers 200] [--wall S] [--database sqlite|postgresql]
       [--set NAME=VALUE ...]
"""

import argparse
import http.cookiejar
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "accumulate"
EXERCISE = "gradient-accumulation/accumulate"
ENDLESS = "while True:\n    pass\n"
FLOODER, HONEST = "127.0.0.2", [f"127.0.0.{i}" for i in range(3, 12)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cookieless_client(address: str, connections: int) -> httpx.Client:
    """One address's connections, shared by its submitting threads: its cookie jar keeps
    nothing, so every submission comes from a new anonymous learner. (A new client per request
    cost this 2-core machine more CPU than the server used: an SSL context each.)"""
    jar = http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return httpx.Client(
        transport=httpx.HTTPTransport(
            local_address=address, limits=httpx.Limits(max_connections=connections)
        ),
        cookies=jar,
        timeout=30,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--endless", type=int, default=30)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--pollers", type=int, default=200)
    parser.add_argument("--wall", type=float, default=None, help="cap every job's wall clock")
    parser.add_argument("--settle-s", type=float, default=600, help="longest wait for results")
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="a server setting"
    )
    args = parser.parse_args()
    postgres = None
    if args.database == "postgresql":
        from api_load import Postgres  # bench/ is this script's sys.path[0]

        postgres = Postgres(Path(tempfile.mkdtemp(prefix="gradlab-overload-pg-")))
        postgres.start()
    try:
        serve_and_load(args, postgres.create_database("overload") if postgres else None)
    finally:
        if postgres is not None:
            postgres.stop()


def serve_and_load(args: argparse.Namespace, database_url: str | None) -> None:
    data = Path(tempfile.mkdtemp(prefix="gradlab-overload-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADLAB_")}
    env["GRADLAB_DATA_DIR"] = str(data)
    env["GRADLAB_LOG_FORMAT"] = "json"  # its request lines carry the server's own answer times
    if database_url:
        env["GRADLAB_DATABASE_URL"] = database_url
    if args.wall:
        env["GRADLAB_MAX_WALL_S"] = str(args.wall)
    for setting in args.set:  # e.g. db_lock_wait_s=1 -> GRADLAB_DB_LOCK_WAIT_S=1
        name, _, value = setting.partition("=")
        env[f"GRADLAB_{name.upper()}"] = value
    log = (data / "serve.log").open("wb")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gradlab.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(args.workers),
        ],
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
        run(args, url, database_url or f"sqlite:///{data / 'gradlab.db'}", data / "serve.log")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        log.close()


def server_answer_times(log: Path) -> list[float]:
    """Seconds the server took to answer each `POST /api/v1/submissions`, from its own request
    log lines (app/access_log.py): what the load generator's clock adds is not in them."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        if '"event": "request"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("method") == "POST" and entry.get("path") == "/api/v1/submissions":
            times.append(entry["ms"] / 1000)
    return times


def run(args: argparse.Namespace, url: str, database_url: str, log: Path) -> None:
    rng = random.Random(0)
    corpus = sorted(p for p in CORPUS.glob("*.py") if "endless" not in p.name)
    correct = (CORPUS / "canonical.py").read_text()
    plan: list[tuple[str, str, bool]] = [(FLOODER, ENDLESS, False)] * args.endless
    plan += [(FLOODER, correct, False)] * (args.jobs // 10 - args.endless // 10)
    while len(plan) < args.jobs:
        source = rng.choice(corpus)
        code = source.read_text()
        plan.append((rng.choice(HONEST), code, code.startswith("# expect: passed")))
    rng.shuffle(plan)

    health: list[float] = []
    health_status: Counter[int] = Counter()
    accepted: dict[str, tuple[float, bool, str]] = {}  # id -> (at, honest correct, cookie)
    answers: list[tuple[int, float]] = []
    polls: Counter[int] = Counter()
    lock = threading.Lock()
    load_over = threading.Event()

    def watch_health() -> None:
        with httpx.Client(timeout=10) as c:
            while not load_over.is_set():
                started = time.monotonic()
                try:
                    status = c.get(f"{url}/healthz").status_code
                except httpx.HTTPError:
                    status = -1
                health.append(time.monotonic() - started)
                health_status[status] += 1
                time.sleep(0.25)

    senders = {a: cookieless_client(a, args.clients) for a in [FLOODER, *HONEST]}

    def submit(item: tuple[str, str, bool]) -> None:
        address, code, honest_correct = item
        started = time.monotonic()
        try:
            response = senders[address].post(
                f"{url}/api/v1/submissions", json={"exercise": EXERCISE, "code": code}
            )
            status = response.status_code
        except httpx.HTTPError:
            status = -1
        took = time.monotonic() - started
        with lock:
            answers.append((status, took))
            if status == 202:
                cookie = response.cookies.get("gradlab_learner", "")
                accepted[response.json()["id"]] = (time.time(), honest_correct, cookie)

    graded: dict[str, float] = {}  # id -> finished_at, as the learner's poll saw it

    def poll(index: int) -> None:
        """A learner's page asking for its result every 2 s (its own cookie)."""
        with httpx.Client(timeout=30) as c:
            while not load_over.is_set():
                with lock:
                    mine = [
                        (i, cookie)
                        for n, (i, (_, _, cookie)) in enumerate(accepted.items())
                        if n % args.pollers == index and i not in graded
                    ]
                for submission_id, cookie in mine:
                    c.cookies.set("gradlab_learner", cookie)
                    try:
                        response = c.get(f"{url}/api/v1/submissions/{submission_id}")
                    except httpx.HTTPError:
                        continue
                    with lock:
                        polls[response.status_code] += 1
                    body = response.json() if response.status_code == 200 else {}
                    if body.get("finished_at"):
                        with lock:
                            graded[submission_id] = body["finished_at"]
                time.sleep(2)

    threading.Thread(target=watch_health, daemon=True).start()
    for index in range(args.pollers):
        threading.Thread(target=poll, args=(index,), daemon=True).start()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.clients) as pool:
        list(pool.map(submit, plan))
    for sender in senders.values():
        sender.close()
    submitted_in = time.monotonic() - started
    engine = create_engine(database_url)
    end = time.monotonic() + args.settle_s
    while time.monotonic() < end:
        with lock:
            if all(i in graded for i in accepted):
                break
        time.sleep(1)
    load_over.set()
    recovered = time.monotonic()
    while time.monotonic() - recovered < 120:
        try:
            page = httpx.get(f"{url}/en/lessons/gradient-accumulation", timeout=1)
            ok = httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            if page.status_code == 200 and ok:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    recovered_s = time.monotonic() - recovered
    with engine.connect() as connection:
        jobs = connection.execute(
            text("SELECT submission_id, COUNT(*) AS n, MAX(attempts) AS a FROM job GROUP BY 1")
        ).all()
    duplicated = sum(1 for j in jobs if j.n > 1 or j.a > 1)
    statuses = Counter(status for status, _ in answers)
    honest = [graded[i] - at for i, (at, good, _) in accepted.items() if good and i in graded]
    five_xx = sum(n for status, n in statuses.items() if status >= 500 and status != 503)
    lost = sum(i not in graded for i in accepted)
    slowest = max(took for _, took in answers)
    print(f"submissions: {len(plan)} ({args.endless} endless, one address) in {submitted_in:.1f} s")
    print(f"answers: {dict(sorted(statuses.items()))}; 5xx other than 503: {five_xx}")
    server = sorted(server_answer_times(log))
    print(
        f"slowest answer to a submission: {slowest:.2f} s as the generator saw it; by the "
        f"server's log: max {server[-1]:.2f} s, p99 {server[int(len(server) * 0.99)]:.2f} s "
        f"({len(server)} lines)"
    )
    print(f"accepted {len(accepted)}, lost {lost}, duplicated {duplicated}")
    if honest:
        p50, worst = statistics.median(honest), max(honest)
        print(f"honest correct, to result: p50 {p50:.1f} s, max {worst:.1f} s ({len(honest)})")
    print(f"learners' polls: {dict(sorted(polls.items()))}")
    p50 = statistics.median(health)
    print(
        f"/healthz during the load: max {max(health):.2f} s, p50 {p50:.3f} s, "
        f"answers {dict(sorted(health_status.items()))}"
    )
    print(f"back to normal {recovered_s:.2f} s after the load")


if __name__ == "__main__":
    main()
