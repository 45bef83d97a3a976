"""1,000 submissions through the HTTP API, graded by 1, 2 and 4 worker processes (issue 7).

Per worker count, on a fresh database: a throwaway PostgreSQL (initdb + pg_ctl, like
tests/pg.py, without pytest) or SQLite, one web-only `gradlab serve --workers 0`, N `gradlab
worker` processes (GRADLAB_POOL_SLOTS=1, CPU device), and a grader token (`gradlab token
create`; anonymous cookie client if that fails) with the rate limits raised. The jobs are a
fixed, shuffled mix of the corpus (tests/corpus/<exercise>/*.py, correct and wrong ones; files
that time out on purpose are left out), the same for every row. All jobs are submitted at once:
`--clients` connections POST as fast as the API accepts (`--rate R` paces them at R/s instead).

Measured per row, from the API's own fields (server clock = client clock, same machine):
- drain: first POST sent to the last result stored (max `finished_at`);
- ideal: sum of the jobs' `timings.run_s` (the whole grade: sandbox run + judgement) / workers;
  efficiency = ideal / drain: the share of the workers' time spent grading (the rest is
  queue claim/finish, polling gaps, start skew and the tail);
- throughput: results / drain, and its ratio to the 1-worker row;
- time-to-result p50/p95: POST sent to result stored (`finished_at`); the worker's
  `timings.total_s` (job created to grade done) p50/p95 too;
- run_s inflation: the mean `run_s` against the 1-worker row's (CPU contention);
  eff/cores: the 1-worker row's mean run_s x jobs / min(workers, cores) / drain, i.e. the
  throughput against what the machine's cores allow;
- CPU busy: all cores, the whole machine (/proc/stat), over the drain.
Checked: every submission has exactly one result (one job, 1 attempt, status done, one accepted
`finish` in the workers' JSON logs); verdicts that differ from the corpus headers are counted.

Usage: .venv/bin/python bench/api_load.py [--jobs 1000] [--workers 1 2 4]
       [--database postgresql|sqlite] [--clients 4] [--rate 0] [--torch-threads 1]
"""

import argparse
import contextlib
import glob
import json
import os
import platform
import pwd
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
HEADER = re.compile(r"# expect: (passed|failed|error)(?: (\w+))?")
# verdicts that hog a worker on purpose (wall clock, memory, processes, output): not a workload
HOGS = {"timeout", "memory_limit", "output_limit", "process_limit"}
DONE = {"passed", "failed", "error"}
PG_USER = "gradlab"


# --- a throwaway PostgreSQL (the same recipe as tests/pg.py, which needs pytest) ----------


def find_pg_bin() -> Path:
    if configured := os.environ.get("GRADLAB_PG_BIN"):
        return Path(configured)
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if found:
        return Path(found[-1]).parent
    if which := shutil.which("initdb"):
        return Path(which).resolve().parent
    raise SystemExit("PostgreSQL binaries (initdb, pg_ctl) not found; set GRADLAB_PG_BIN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Postgres:
    root: Path
    bin_dir: Path = field(default_factory=find_pg_bin)
    port: int = field(default_factory=free_port)
    run_as: str | None = None

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")

    def start(self) -> None:
        if os.geteuid() == 0:  # postgres refuses to run as root
            self.run_as = next(n for n in ("postgres", "nobody") if _user_exists(n))
            entry = pwd.getpwnam(self.run_as)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        data = str(self.root / "data")
        self._run(
            "initdb",
            "-D",
            data,
            "-U",
            PG_USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        )
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            " -c max_connections=300 -c shared_buffers=64MB"
        )
        log = str(self.root / "postgres.log")
        self._run("pg_ctl", "-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=PG_USER, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
        return f"postgresql+psycopg://{PG_USER}@127.0.0.1:{self.port}/{name}"


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# --- the workload -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    exercise: str
    name: str
    code: str
    expected: tuple[str, str | None]  # (status, diagnosis code or error kind)


def corpus() -> list[Case]:
    exercises = {
        p.stem: f"{p.parent.parent.name}/{p.stem}" for p in ROOT.glob("lessons/*/exercises/*.py")
    }
    cases = []
    for path in sorted(CORPUS.glob("*/*.py")):
        code = path.read_text(encoding="utf-8")
        match = HEADER.match(code.splitlines()[0])
        if match is None or path.parent.name not in exercises:
            continue
        status, detail = match.group(1), match.group(2)
        if status == "error" and detail in HOGS:
            continue
        name = f"{path.parent.name}/{path.name}"
        cases.append(Case(exercises[path.parent.name], name, code, (status, detail)))
    return cases


def job_mix(cases: list[Case], jobs: int, seed: int) -> list[Case]:
    """Every corpus file equally often (round robin), in a fixed shuffled order."""
    mix = [cases[i % len(cases)] for i in range(jobs)]
    random.Random(seed).shuffle(mix)
    return mix


def verdict(result: dict[str, Any]) -> tuple[str, str | None]:
    if result["status"] == "failed":
        return "failed", (result.get("diagnosis") or {}).get("code")
    if result["status"] == "error":
        return "error", (result.get("error") or {}).get("kind")
    return result["status"], None


# --- one row: web + N workers on a fresh database -----------------------------------------


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores."""
    values = [float(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Cluster:
    def __init__(self, root: Path, database_url: str | None, workers: int, args: Any) -> None:
        self.root = root
        self.workers_wanted = workers
        root.mkdir(parents=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db_url = database_url or f"sqlite:///{root / 'data' / 'gradlab.db'}"
        self.env = {
            **os.environ,
            "GRADLAB_DATA_DIR": str(root / "data"),
            "GRADLAB_SECRET_KEY": "bench-api-load",
            "GRADLAB_DEVICE": "cpu",
            "GRADLAB_POOL_SLOTS": "1",
            "GRADLAB_LOG_FORMAT": "json",
            "GRADLAB_CONTENT_RELOAD_S": "0",
            "GRADLAB_SUBMISSION_RATE_LIMIT": "1000000",
            "GRADLAB_GRADER_RATE_LIMIT": "1000000",
        }
        if database_url:
            self.env["GRADLAB_DATABASE_URL"] = database_url
        if args.torch_threads:
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                self.env[name] = str(args.torch_threads)
        self.processes: list[subprocess.Popen[bytes]] = []

    def _spawn(self, log_name: str, *command: str) -> subprocess.Popen[bytes]:
        with (self.root / log_name).open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "gradlab.cli", *command],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)
        return process

    def start(self) -> None:
        web = self._spawn("web.log", "serve", "--workers", "0", "--port", str(self.port))
        deadline = time.monotonic() + 120
        while True:  # the web creates the tables; the workers start after it
            if web.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"web did not start: {self.log('web.log')}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        for index in range(self.workers_wanted):
            self._spawn(f"worker-{index + 1}.log", "worker")
        while True:  # a worker logs `worker_ready` once its sandbox pool is up
            ready = sum(
                '"event": "worker_ready"' in (self.root / f"worker-{i + 1}.log").read_text()
                for i in range(self.workers_wanted)
            )
            if ready >= self.workers_wanted:
                break
            if any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"a worker died: {self.log('worker-1.log')}")
            if time.monotonic() > deadline + 120:
                raise RuntimeError("workers did not get ready")
            time.sleep(0.2)

    def token(self) -> str | None:
        """A grader token, or None (then an anonymous cookie client) where the CLI has none."""
        done = subprocess.run(
            [sys.executable, "-m", "gradlab.cli", "token", "create", "bench-api-load"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        lines = done.stdout.strip().splitlines()
        return lines[-1].strip() if done.returncode == 0 and lines else None

    def stop(self) -> None:
        for process in reversed(self.processes):  # workers first, then the web
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def log(self, name: str) -> str:
        return (self.root / name).read_text(errors="replace")[-3000:]

    def finish_events(self) -> Counter[int]:
        """Accepted `finish` log lines per job id, from the workers' JSON logs."""
        accepted: Counter[int] = Counter()
        for path in self.root.glob("worker-*.log"):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{") and '"event": "finish"' in line:
                    event = json.loads(line)
                    if event.get("accepted"):
                        accepted[int(event["job_id"])] += 1
        return accepted

    def jobs(self) -> list[Any]:
        engine = create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                return list(
                    conn.execute(
                        text(
                            "SELECT id, submission_id, status, attempts, lease_owner, started_at,"
                            " finished_at FROM job"
                        )
                    )
                )
        finally:
            engine.dispose()


@dataclass
class Posted:
    case: Case
    sent_at: float = 0.0
    submission_id: str = ""
    result: dict[str, Any] | None = None
    finished_at: float = 0.0


def submit_all(
    cluster: Cluster, mix: list[Case], headers: dict[str, str], args: Any
) -> tuple[list[Posted], float, float, int, threading.Thread, dict[str, Any]]:
    """POST every job from `args.clients` connections; poll for results meanwhile."""
    posted = [Posted(case) for case in mix]
    index_lock = threading.Lock()
    next_index = [0]
    retries = [0]
    cookies: list[httpx.Cookies] = []
    submitted: list[int] = []  # indices whose POST was answered, in answer order
    all_posted = threading.Event()
    started = time.time()

    def client() -> None:
        with httpx.Client(base_url=cluster.url, headers=headers, timeout=60) as http:
            if cookies:  # anonymous: every connection is the same learner
                http.cookies = cookies[0]
            while True:
                with index_lock:
                    i = next_index[0]
                    next_index[0] += 1
                if i >= len(posted):
                    return
                if args.rate > 0:
                    time.sleep(max(0.0, started + i / args.rate - time.time()))
                item = posted[i]
                body = {"exercise": item.case.exercise, "code": item.case.code, "locale": "en"}
                while True:
                    item.sent_at = time.time()
                    answer = http.post("/api/v1/submissions", json=body)
                    if answer.status_code != 429:
                        break
                    retries[0] += 1
                    time.sleep(float(answer.headers.get("Retry-After", "1")))
                answer.raise_for_status()
                item.submission_id = answer.json()["id"]
                with index_lock:
                    submitted.append(i)

    poll_state: dict[str, Any] = {"cpu": [], "error": None}
    if "Authorization" not in headers:  # one learner cookie for all connections
        with httpx.Client(base_url=cluster.url, timeout=60) as http:
            http.get("/api/v1/exercises")
            cookies.append(http.cookies)
            headers = {**headers}

    def poller() -> None:
        """Read the oldest unfinished submissions (jobs are claimed oldest first); after a few
        still unfinished, sleep. Only detects the end: the timings come from `finished_at`."""
        pending: list[int] = []
        seen = 0
        try:
            with httpx.Client(base_url=cluster.url, headers=headers, timeout=60) as http:
                if cookies:
                    http.cookies = cookies[0]
                while True:
                    poll_state["cpu"].append((time.time(), *cpu_times()))
                    with index_lock:
                        pending.extend(submitted[seen:])
                        seen = len(submitted)
                    if not pending and all_posted.is_set() and seen == len(posted):
                        return
                    misses = 0
                    for i in list(pending):
                        item = posted[i]
                        body = _get_json(http, f"/api/v1/submissions/{item.submission_id}")
                        if body["status"] in DONE:
                            item.result = body["result"]
                            item.finished_at = float(body["finished_at"])
                            pending.remove(i)
                        else:
                            misses += 1
                            if misses > cluster.workers_wanted + 2:
                                break
                    time.sleep(args.poll_s)
        except Exception as exc:  # reported by the caller
            poll_state["error"] = exc

    poll_thread = threading.Thread(target=poller, daemon=True)
    poll_thread.start()
    clients = [threading.Thread(target=client) for _ in range(args.clients)]
    first = time.time()
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    all_posted.set()
    last_post = time.time()
    if len(submitted) != len(posted):
        raise RuntimeError(f"only {len(submitted)} of {len(posted)} POSTs were accepted")
    return posted, first, last_post, retries[0], poll_thread, poll_state


def _get_json(http: httpx.Client, path: str) -> Any:
    """GET with a few retries: a refused connection under heavy load is not a lost result."""
    for attempt in range(20):
        try:
            return http.get(path).raise_for_status().json()
        except httpx.TransportError:
            if attempt == 19:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def run_row(workers: int, mix: list[Case], database_url: str | None, root: Path, args: Any) -> Any:
    cluster = Cluster(root, database_url, workers, args)
    load_before = os.getloadavg()
    try:
        started = time.monotonic()
        cluster.start()
        ready_s = time.monotonic() - started
        token = cluster.token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        time.sleep(1.0)  # let the start-up CPU settle
        load_at_start = os.getloadavg()
        posted, first, last_post, retries, poll_thread, poll_state = submit_all(
            cluster, mix, headers, args
        )
        poll_thread.join(timeout=args.timeout)
        if poll_thread.is_alive() or poll_state["error"] is not None:
            raise RuntimeError(f"results did not all arrive: {poll_state['error']}")
        load_after = os.getloadavg()
        jobs = cluster.jobs()
        accepted = cluster.finish_events()
    except BaseException:
        kept = Path(tempfile.mkdtemp(prefix="gradlab-api-load-failed-"))
        for log in root.glob("*.log"):
            shutil.copy(log, kept)
        alive = bool(cluster.processes) and cluster.processes[0].poll() is None
        print(f"  logs kept in {kept}; web alive: {alive}", flush=True)
        raise
    finally:
        cluster.stop()

    # exactly one result each
    ids = {p.submission_id for p in posted}
    by_submission = Counter(row.submission_id for row in jobs)
    problems = []
    if len(ids) != len(posted):
        problems.append("duplicate submission ids")
    if set(by_submission) != ids or any(n != 1 for n in by_submission.values()):
        problems.append("not exactly one job per submission")
    bad_jobs = [row for row in jobs if row.status != "done" or row.attempts != 1]
    if bad_jobs:
        problems.append(f"{len(bad_jobs)} jobs not done in exactly 1 attempt: {bad_jobs[:3]}")
    if sorted(accepted) != sorted(row.id for row in jobs) or any(n != 1 for n in accepted.values()):
        problems.append("accepted finish events are not exactly one per job")
    if any(p.result is None for p in posted):
        problems.append("submissions without a result")
    mismatched = Counter(
        p.case.name for p in posted if p.result is not None and verdict(p.result) != p.case.expected
    )

    last = max(p.finished_at for p in posted)
    drain = last - first
    run_s = [float(p.result["timings"]["run_s"]) for p in posted if p.result]
    total_s = [float(p.result["timings"]["total_s"]) for p in posted if p.result]
    to_result = [p.finished_at - p.sent_at for p in posted]
    # where the workers' time went besides grading (job timestamps are taken by the queue)
    run_of = {p.submission_id: float(p.result["timings"]["run_s"]) for p in posted if p.result}
    in_job = [r.finished_at - r.started_at - run_of[r.submission_id] for r in jobs]
    gaps = []
    for owner in {r.lease_owner for r in jobs}:
        mine = sorted((r for r in jobs if r.lease_owner == owner), key=lambda r: r.started_at)
        gaps += [b.started_at - a.finished_at for a, b in pairwise(mine)]
    samples = poll_state["cpu"]
    start_cpu = min(samples, key=lambda s: abs(s[0] - first))
    end_cpu = min(samples, key=lambda s: abs(s[0] - last))
    busy = (end_cpu[1] - start_cpu[1]) / max(1.0, end_cpu[2] - start_cpu[2])
    return {
        "workers": workers,
        "jobs": len(posted),
        "auth": "grader token" if headers else "anonymous cookie",
        "ready_s": ready_s,
        "submit_s": last_post - first,
        "retries_429": retries,
        "drain_s": drain,
        "sum_run_s": sum(run_s),
        "mean_run_s": statistics.fmean(run_s),
        "ideal_s": sum(run_s) / workers,
        "efficiency": sum(run_s) / workers / drain,
        "throughput": len(posted) / drain,
        "p50_s": statistics.median(to_result),
        "p95_s": percentile(to_result, 0.95),
        "total_p50_s": statistics.median(total_s),
        "total_p95_s": percentile(total_s, 0.95),
        "cpu_busy": busy,
        "idle_ms_per_job": (drain * workers - sum(run_s)) / len(posted) * 1000,
        "claim_to_result_overhead_ms": statistics.fmean(in_job) * 1000,
        "gap_between_jobs_ms_p50": statistics.median(gaps) * 1000 if gaps else 0.0,
        "gap_between_jobs_ms_mean": statistics.fmean(gaps) * 1000 if gaps else 0.0,
        "load_before": load_before,
        "load_at_start": load_at_start,
        "load_after": load_after,
        "statuses": dict(Counter(p.result["status"] for p in posted if p.result)),
        "verdict_mismatches": dict(mismatched),
        "problems": problems,
    }


def wait_for_quiet(max_load: float | None, wait_s: float) -> None:
    if max_load is None:
        return
    deadline = time.monotonic() + wait_s
    while os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        print(f"  load {os.getloadavg()[0]:.2f} > {max_load}: waiting", flush=True)
        time.sleep(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--clients", type=int, default=4, help="concurrent POST connections")
    parser.add_argument("--rate", type=float, default=0, help="POSTs/s; 0: all at once")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="OMP/MKL threads of the web and worker processes (the sandboxed jobs always "
        "use 1); 0: torch's default (one per core)",
    )
    parser.add_argument("--poll-s", type=float, default=0.25, help="result poller's pause")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=1800, help="per row, for the results")
    parser.add_argument("--max-load", type=float, help="before each row, wait for a quieter box")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()

    cases = corpus()
    mix = job_mix(cases, args.jobs, args.seed)
    cores = os.cpu_count() or 1
    import torch

    print(
        f"# bench/api_load.py {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
        f"{platform.node()} ({cores} cores, Python {platform.python_version()}, torch "
        f"{torch.__version__}); {args.database}, {args.jobs} jobs from {len(cases)} corpus files "
        f"over {len({c.exercise for c in cases})} exercises; "
        f"{'all at once' if args.rate <= 0 else f'{args.rate}/s'} from {args.clients} "
        f"connections; pool slots 1, CPU device, torch threads "
        f"{args.torch_threads or 'default'}; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    rows = []
    root = Path(tempfile.mkdtemp(prefix="gradlab-api-load-"))
    postgres = None
    try:
        if args.database == "postgresql":
            postgres = Postgres(Path(tempfile.mkdtemp(prefix="gradlab-api-load-pg-")))
            postgres.start()
        for workers in args.workers:
            wait_for_quiet(args.max_load, 300)
            url = postgres.create_database(f"bench_w{workers}") if postgres else None
            row = run_row(workers, mix, url, root / f"w{workers}", args)
            rows.append(row)
            print(
                f"  {workers} worker(s): drain {row['drain_s']:.1f} s, {row['throughput']:.2f}/s, "
                f"efficiency {row['efficiency']:.2f}, load {row['load_at_start'][0]:.2f} -> "
                f"{row['load_after'][0]:.2f}, problems {row['problems'] or 'none'}",
                flush=True,
            )
    finally:
        if postgres is not None:
            with contextlib.suppress(RuntimeError):
                postgres.stop()
            shutil.rmtree(postgres.root, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)

    base = rows[0]
    print(
        f"\n| workers | jobs | submit s | drain s | ideal s | efficiency | results/s | "
        f"vs {base['workers']}w | p50 s | p95 s | worker total_s p50/p95 | mean run_s | "
        f"run_s inflation | eff/cores | CPU busy | load 1m |"
    )
    print("| ---: " * 16 + "|")
    for row in rows:
        cpu_ideal = base["mean_run_s"] * row["jobs"] / min(row["workers"], cores)
        print(
            f"| {row['workers']} | {row['jobs']} | {row['submit_s']:.1f} | {row['drain_s']:.1f} | "
            f"{row['ideal_s']:.1f} | {row['efficiency']:.3f} | {row['throughput']:.2f} | "
            f"{row['throughput'] / base['throughput']:.2f} | {row['p50_s']:.1f} | "
            f"{row['p95_s']:.1f} | {row['total_p50_s']:.1f} / {row['total_p95_s']:.1f} | "
            f"{row['mean_run_s']:.3f} | {row['mean_run_s'] / base['mean_run_s']:.2f} | "
            f"{cpu_ideal / row['drain_s']:.3f} | {row['cpu_busy']:.0%} | "
            f"{row['load_at_start'][0]:.2f} |"
        )
    for row in rows:
        print(
            f"{row['workers']}w: {row['statuses']}, auth {row['auth']}, ready in "
            f"{row['ready_s']:.1f} s, 429 retries {row['retries_429']}, verdicts unlike the "
            f"corpus header: {row['verdict_mismatches'] or 'none'}; per job besides grading: "
            f"{row['idle_ms_per_job']:.1f} ms of worker time (claim to grade end minus run_s "
            f"{row['claim_to_result_overhead_ms']:.1f} ms, finish to next claim p50 "
            f"{row['gap_between_jobs_ms_p50']:.1f} / mean {row['gap_between_jobs_ms_mean']:.1f} ms)"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    failed = [row for row in rows if row["problems"]]
    for row in failed:
        print(f"FAILED {row['workers']}w: {row['problems']}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
