"""The `gradlab` command line. Imports the web app or the worker only for the command run."""

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gradlab.config import LOCALES, get_settings
from gradlab.logs import configure_logging

WORKER_CHECK_S = 2.0
WORKER_GRACE_S = 30.0  # serve's default: a local worker's time to finish its job on shutdown
WEB_GRACE_S = 10.0  # uvicorn: open requests' time to finish on shutdown, then they are cut
PR_SET_PDEATHSIG = 1  # linux/prctl.h
SERVE_PID_ENV = "GRADLAB_SERVE_PID"  # serve's pid, for the web processes it spawns


class _Shutdown(BaseException):
    """SIGTERM or SIGINT reached `gradlab serve` (a BaseException: nothing may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _StopSignals:
    """serve's SIGTERM/SIGINT handler. While uvicorn serves, its own handler has them: it stops
    accepting, finishes the requests in flight, puts back the handler it found (this one) and
    raises the signal again (uvicorn.Server.capture_signals), which raises _Shutdown here out of
    uvicorn.run; before uvicorn has taken over, the first signal raises _Shutdown as well. Once
    serve is stopping, another signal raises nothing: it hurries, the workers are killed now."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.stopping = False
        self.hurried = False

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self)

    def __call__(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        if self.stopping:
            self.hurried = True
            return
        self.stopping = True
        raise _Shutdown(signum)


class _LocalWorkers:
    """serve's `gradlab worker` processes: started, restarted when one dies, stopped. Each gets
    serve's pid (`--parent-pid`) and dies with serve, even a SIGKILLed one (_die_with_parent)."""

    def __init__(self, count: int) -> None:
        self.command = [sys.executable, "-m", "gradlab.cli", "worker"]
        self.command += ["--parent-pid", str(os.getpid())]
        self.count = count
        self.processes: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()
        self.stopping = False

    def start(self) -> None:
        with self.lock:
            while len(self.processes) < self.count and not self.stopping:
                self.processes.append(subprocess.Popen(self.command))
        if self.count:
            threading.Thread(target=self._supervise, name="gradlab-workers", daemon=True).start()

    def _supervise(self) -> None:
        """Restart a worker that died (a crash must not stop grading). Never returns: the kernel
        kills a worker when the thread that started it ends (PR_SET_PDEATHSIG is per thread)."""
        while True:
            time.sleep(WORKER_CHECK_S)
            with self.lock:
                for index, worker in enumerate(self.processes):
                    if worker.poll() is not None and not self.stopping:
                        print(
                            f"gradlab: worker exited with {worker.returncode}; restarting",
                            file=sys.stderr,
                            flush=True,
                        )
                        self.processes[index] = subprocess.Popen(self.command)

    def stop(self, *, grace_s: float, hurry: Callable[[], bool]) -> None:
        """SIGTERM every worker (it claims no more jobs and finishes the one it grades), wait
        up to `grace_s` or until `hurry()`, then SIGKILL what is left; a killed worker's job is
        leased again once its lease expires (gradlab/queue.py), another attempt."""
        with self.lock:  # the supervisor restarts nothing after this
            self.stopping = True
            workers = list(self.processes)
        if not workers:
            return
        print(
            f"gradlab: stopping {len(workers)} local worker(s); grace {grace_s:g} s",
            file=sys.stderr,
            flush=True,
        )
        for worker in workers:
            worker.terminate()
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not hurry():
            if all(worker.poll() is not None for worker in workers):
                return
            time.sleep(0.05)
        for worker in workers:
            if worker.poll() is None:
                print(
                    f"gradlab: worker {worker.pid} still running; killed (its job is graded "
                    "again once its lease expires)",
                    file=sys.stderr,
                    flush=True,
                )
                worker.kill()
            worker.wait()


def _exit_by_signal(signum: int) -> int:
    """End as the signal's default action would, as uvicorn meant to: a shell sees 128 + signum,
    systemd counts a SIGTERM as a clean stop. Returns only where the signal does not end us."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)
    return 128 + signum


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app

    settings = get_settings()
    if args.workers:  # /healthz fails while none of them is alive
        settings.expect_workers = True
        os.environ["GRADLAB_EXPECT_WORKERS"] = "1"  # and in each web process
    # creates the database (and the secret key) before any web process or worker starts
    app = create_app(settings)
    web = args.web_processes or _cores()
    workers = _LocalWorkers(args.workers)
    signals = _StopSignals()
    signals.install()  # from here on SIGTERM/SIGINT stop the workers too (_StopSignals)
    print(
        f"gradlab: serving on http://{args.host}:{args.port} with {web} web process(es) and "
        f"{args.workers} local worker(s)"
        f"{' (web only: run `gradlab worker`s)' if not args.workers else ''}; "
        f"database {_redacted(settings.resolved_database_url)}",
        flush=True,
    )
    # json logs: uvicorn's own loggers go through the root handler (gradlab.logs) too
    log_config = None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "log_level": "info",
        "log_config": log_config,
        "access_log": False,  # app/access_log.py logs every request, with its duration
        # open requests (a `?wait` may hold one for a minute) get this long to finish
        "timeout_graceful_shutdown": WEB_GRACE_S,
        **settings.uvicorn_proxy_options(),  # forwarded headers: only if configured
    }
    try:
        workers.start()
        if web == 1:
            uvicorn.run(app, **options)
        else:
            del app  # each web process makes its own
            _serve_web_processes(web, options, signals)
    except _Shutdown as shutdown:
        print(f"gradlab: {signal.Signals(shutdown.signum).name}: web stopped", flush=True)
    finally:
        signals.stopping = True
        workers.stop(grace_s=args.worker_grace, hurry=lambda: signals.hurried)
    if signals.received:
        return _exit_by_signal(signals.received[0])
    return 0


def _cores() -> int:
    """The cores this process may run on: serve's default count of web processes."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _serve_web_processes(count: int, options: dict[str, Any], signals: _StopSignals) -> None:
    """`count` uvicorn processes on one listening socket (uvicorn's own supervisor: it restarts
    one that dies). Each is spawned, so it imports the app afresh (`web_app`), and dies with
    serve, even a SIGKILLed serve. The supervisor takes SIGTERM/SIGINT while it runs: it stops
    the web processes (each finishes its open requests) and returns; the signal is then
    recorded as if `signals` had caught it, and a second one hurries the workers."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    os.environ[SERVE_PID_ENV] = str(os.getpid())
    config = uvicorn.Config(f"{__name__}:web_app", factory=True, workers=count, **options)
    supervisor = Multiprocess(config, sockets=[config.bind_socket()])
    original = supervisor.handle_signals

    def handle_signals() -> None:
        for signum in supervisor.signal_queue:
            if signum in (signal.SIGTERM, signal.SIGINT) and not signals.received:
                signals.received.append(signum)
        original()

    supervisor.handle_signals = handle_signals  # type: ignore[method-assign]
    try:
        supervisor.run()
    finally:
        signals.install()
        signals.stopping = True
    if signals.received:
        name = signal.Signals(signals.received[0]).name
        print(f"gradlab: {name}: web stopped", flush=True)


def web_app() -> Any:
    """The FastAPI app of one of serve's web processes (uvicorn's factory, in a spawned
    process)."""
    from app.main import create_app

    parent = os.environ.get(SERVE_PID_ENV)
    if parent:
        _die_with_parent(int(parent))
    configure_logging(get_settings().log_format)
    return create_app()


def _redacted(url: str) -> str:
    """The database URL without its password, for logs."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _die_with_parent(parent_pid: int) -> None:
    """A local worker of `gradlab serve` ends with serve, even with a SIGKILLed one: on Linux
    the kernel SIGKILLs it when serve ends (PR_SET_PDEATHSIG; its sandboxes follow, bwrap's
    --die-with-parent); elsewhere a thread watches the parent pid. The job it held is leased
    again once its lease expires (gradlab/queue.py)."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent_pid:  # serve ended before the prctl
                os.kill(os.getpid(), signal.SIGKILL)
            return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="gradlab-parent-watch", daemon=True).start()


def _worker(args: argparse.Namespace) -> int:
    if args.parent_pid is not None:
        _die_with_parent(args.parent_pid)
    from worker.main import run_worker

    run_worker(settings=get_settings())
    # Stopped cleanly: its job finished, heartbeat marked stopped, sandboxes closed. Skip the
    # interpreter's teardown of torch & co (seconds on a busy machine, out of serve's grace).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _grade(args: argparse.Namespace) -> int:
    from gradlab.content.loader import load_content

    settings = get_settings()
    content = load_content(settings.content_dir)
    if args.exercise not in content.exercises:
        known = ", ".join(sorted(content.exercises))
        print(
            f"gradlab grade: unknown exercise {args.exercise!r} (known: {known})", file=sys.stderr
        )
        return 2
    try:
        code = Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"gradlab grade: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    from worker.grading import grade  # imports torch (seconds): only once the input is good

    result = grade(
        content=content, settings=settings, exercise=args.exercise, code=code, locale=args.locale
    )
    print(json.dumps(result.model_dump(), indent=2, ensure_ascii=False))
    return 0 if result.status == "passed" else 1


def _lessons_check(args: argparse.Namespace) -> int:
    """Errors (exit 1) make the content unusable; warnings are gaps in translations."""
    from gradlab.content.loader import load_content
    from gradlab.content.schema_files import stale_schema_files
    from gradlab.content.translation import translation_warnings
    from gradlab.content.yamlfile import ContentError

    settings = get_settings()
    try:
        content = load_content(settings.content_dir)
    except ContentError as exc:
        for problem in exc.problems:
            print(f"{problem.file}:{problem.line}: error: {problem.message}", file=sys.stderr)
        print(f"{len(exc.problems)} error(s)", file=sys.stderr)
        return 1
    stale = stale_schema_files(settings.content_dir)
    for path in stale:
        print(f"{path}:1: error: stale; run `gradlab lessons schema`", file=sys.stderr)
    warnings = translation_warnings(content)
    for problem in warnings:
        print(f"{problem.file}:{problem.line}: warning: {problem.message}", file=sys.stderr)
    print(
        f"{len(content.lessons)} lessons, {len(content.exercises)} exercises: "
        f"{len(stale)} error(s), {len(warnings)} warning(s)"
    )
    return 1 if stale or (args.strict and warnings) else 0


def _lessons_status(_args: argparse.Namespace) -> int:
    from gradlab.content.loader import load_content
    from gradlab.content.translation import translation_status

    content = load_content(get_settings().content_dir)
    print(f"{'lesson':24} {'locale':6} {'translated':>10}  outdated / missing")
    for status in translation_status(content):
        outdated, missing = status.keys("outdated"), status.keys("missing")
        print(
            f"{status.lesson:24} {status.locale:6} {status.translated_share:>10.0%}  "
            f"{', '.join(outdated) or '-'} / {', '.join(missing) or '-'}"
        )
    return 0


def _lessons_stamp(args: argparse.Namespace) -> int:
    from gradlab.content.loader import load_content
    from gradlab.content.stamp import StampError, stamp

    content = load_content(get_settings().content_dir)
    try:
        stamped = stamp(content, lesson=args.lesson, locale=args.locale, keys=args.parts or None)
    except StampError as exc:
        print(f"gradlab lessons stamp: {exc}", file=sys.stderr)
        return 2
    print(f"stamped {len(stamped)} part(s): {', '.join(stamped) or '-'}")
    return 0


def _lessons_schema(args: argparse.Namespace) -> int:
    from gradlab.content.schema_files import stale_schema_files, write_schema_files

    content_dir = get_settings().content_dir
    if args.check:
        stale = stale_schema_files(content_dir)
        for path in stale:
            print(f"{path}: stale; run `gradlab lessons schema`", file=sys.stderr)
        return 1 if stale else 0
    for path in write_schema_files(content_dir):
        print(f"wrote {path}")
    return 0


def _token_session():  # type: ignore[no-untyped-def]
    from sqlmodel import Session

    from gradlab.db import init_db, make_engine

    engine = make_engine(get_settings())
    init_db(engine)
    return Session(engine)


def _when(timestamp: float | None) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(timestamp)) if timestamp else "-"


def _token_create(args: argparse.Namespace) -> int:
    from gradlab import tokens

    with _token_session() as session:
        try:
            new = tokens.create(session=session, name=args.name)
        except tokens.TokenError as exc:
            print(f"gradlab token create: {exc}", file=sys.stderr)
            return 2
    print(f"created grader token {new.id} ({new.name!r}); owner grader:{new.id}")
    print(f"webhook signing secret (shown once; verifies callbacks): {new.webhook_secret}")
    print("token (shown once; send `Authorization: Bearer <token>`):")
    print(new.token)
    return 0


def _token_list(_args: argparse.Namespace) -> int:
    from gradlab import tokens

    with _token_session() as session:
        rows = tokens.list_tokens(session=session)
    print(f"{'id':>4}  {'name':24} {'token':14} {'created':16}  {'last used':16}  revoked")
    for row in rows:
        print(
            f"{row.id:>4}  {row.name:24} {row.prefix + '...':14} {_when(row.created_at):16}  "
            f"{_when(row.last_used_at):16}  {_when(row.revoked_at)}"
        )
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    from gradlab import tokens

    with _token_session() as session:
        try:
            row = tokens.revoke(session=session, name_or_id=args.token)
        except tokens.TokenError as exc:
            print(f"gradlab token revoke: {exc}", file=sys.stderr)
            return 2
    print(f"revoked grader token {row.id} ({row.name!r})")
    return 0


def _user_instructor(args: argparse.Namespace) -> int:
    """Give (or with --revoke take back) an account's instructor role: class insight."""
    from gradlab.instructors import set_instructor

    with _token_session() as session:
        user = set_instructor(session=session, email=args.email, instructor=not args.revoke)
    if user is None:
        print(f"gradlab user instructor: no account with the email {args.email!r}", file=sys.stderr)
        return 1
    print(f"{user.email}: {'instructor' if user.instructor else 'not an instructor'}")
    return 0


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return number


def _seconds(value: str) -> float:
    number = float(value)
    if not number >= 0:  # also NaN
        raise argparse.ArgumentTypeError("must be 0 or more seconds")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gradlab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="web app + local worker(s), SQLite by default")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--workers",
        type=_non_negative,
        default=1,
        help="local worker processes; 0: web only, with `gradlab worker`s elsewhere",
    )
    serve.add_argument(
        "--web-processes",
        type=_non_negative,
        default=0,
        metavar="N",
        help="web server processes sharing the port (default 0: one per core this process may "
        "use); 1 serves from serve's own process",
    )
    serve.add_argument(
        "--worker-grace",
        type=_seconds,
        default=WORKER_GRACE_S,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long local workers may take to finish their jobs before "
        f"they are killed (default {WORKER_GRACE_S:g}; a second signal kills them at once)",
    )
    serve.set_defaults(run=_serve)

    worker = commands.add_parser("worker", help="a grading worker only (scale-out)")
    worker.add_argument(
        "--parent-pid",
        type=int,
        metavar="PID",
        help="die when process PID, this worker's parent, ends (set by `gradlab serve`)",
    )
    worker.set_defaults(run=_worker)

    grade = commands.add_parser("grade", help="grade FILE locally through the sandbox")
    grade.add_argument("exercise", help="e.g. gradient-accumulation/accumulate")
    grade.add_argument("file")
    grade.add_argument("--locale", choices=LOCALES, default="en")
    grade.set_defaults(run=_grade)

    lessons = commands.add_parser("lessons", help="content tools")
    lessons_commands = lessons.add_subparsers(dest="lessons_command", required=True)
    check = lessons_commands.add_parser(
        "check", help="validate all content: file:line errors (exit 1) and translation warnings"
    )
    check.add_argument("--strict", action="store_true", help="warnings fail too")
    check.set_defaults(run=_lessons_check)
    status = lessons_commands.add_parser("status", help="translation status per lesson x locale")
    status.set_defaults(run=_lessons_status)
    stamp = lessons_commands.add_parser(
        "stamp", help="mark translated parts as made from the current English"
    )
    stamp.add_argument("lesson")
    stamp.add_argument("locale", choices=[loc for loc in LOCALES if loc != "en"])
    stamp.add_argument(
        "parts", nargs="*", help="e.g. sections.core-trick (default: every unstamped part)"
    )
    stamp.set_defaults(run=_lessons_stamp)
    schema = lessons_commands.add_parser("schema", help="write the JSON Schemas of the files")
    schema.add_argument("--check", action="store_true", help="only check they are current")
    schema.set_defaults(run=_lessons_schema)

    token = commands.add_parser("token", help="grader API tokens (docs/api.md)")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser(
        "create", help="a new token and its webhook secret, printed once (token on the last line)"
    )
    create.add_argument("name", help="who it is for, e.g. moodle-prod (unique among active)")
    create.set_defaults(run=_token_create)
    listing = token_commands.add_parser("list", help="every token: id, name, prefix, use, revoked")
    listing.set_defaults(run=_token_list)
    revoke = token_commands.add_parser("revoke", help="revoke a token by name or id")
    revoke.add_argument("token", metavar="NAME|ID")
    revoke.set_defaults(run=_token_revoke)

    user = commands.add_parser("user", help="accounts (docs/accounts.md)")
    user_commands = user.add_subparsers(dest="user_command", required=True)
    instructor = user_commands.add_parser(
        "instructor", help="let an account read class insight (/{locale}/insights)"
    )
    instructor.add_argument("email")
    instructor.add_argument("--revoke", action="store_true", help="take the role back")
    instructor.set_defaults(run=_user_instructor)
    return parser


def main(argv: list[str] | None = None) -> None:
    configure_logging(get_settings().log_format)
    args = build_parser().parse_args(argv)
    sys.exit(args.run(args))


if __name__ == "__main__":
    main()
