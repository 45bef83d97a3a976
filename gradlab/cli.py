"""The `gradlab` command line. Imports the web app or the worker only for the command run."""

import argparse
import json
import logging
import subprocess
import sys
import threading
from pathlib import Path

from gradlab.config import LOCALES, get_settings

WORKER_CHECK_S = 2.0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app

    settings = get_settings()
    app = create_app(settings)  # creates the database before the workers start
    command = [sys.executable, "-m", "gradlab.cli", "worker"]
    workers = [subprocess.Popen(command) for _ in range(args.workers)]
    stopping = threading.Event()

    def supervise() -> None:
        """Restart a local worker that died (a crash must not stop grading)."""
        while not stopping.wait(WORKER_CHECK_S):
            for index, worker in enumerate(workers):
                if worker.poll() is not None and not stopping.is_set():
                    print(
                        f"gradlab: worker exited with {worker.returncode}; restarting",
                        file=sys.stderr,
                        flush=True,
                    )
                    workers[index] = subprocess.Popen(command)

    threading.Thread(target=supervise, daemon=True).start()
    print(
        f"gradlab: serving on http://{args.host}:{args.port} with {args.workers} local "
        f"worker(s); database {settings.resolved_database_url}",
        flush=True,
    )
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    finally:
        stopping.set()
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
    return 0


def _worker(_args: argparse.Namespace) -> int:
    from worker.main import run_worker

    run_worker(settings=get_settings())
    return 0


def _grade(args: argparse.Namespace) -> int:
    from gradlab.content.loader import load_content
    from worker.grading import grade

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
    result = grade(
        content=content, settings=settings, exercise=args.exercise, code=code, locale=args.locale
    )
    print(json.dumps(result.model_dump(), indent=2, ensure_ascii=False))
    return 0 if result.status == "passed" else 1


def _lessons_check(_args: argparse.Namespace) -> int:
    from gradlab.content.loader import load_content
    from gradlab.content.yamlfile import ContentError

    settings = get_settings()
    try:
        content = load_content(settings.content_dir)
    except ContentError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    print(f"{len(content.lessons)} lessons, {len(content.exercises)} exercises: ok")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gradlab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="web app + local worker(s), SQLite by default")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1, help="local worker processes")
    serve.set_defaults(run=_serve)

    worker = commands.add_parser("worker", help="a grading worker only (scale-out)")
    worker.set_defaults(run=_worker)

    grade = commands.add_parser("grade", help="grade FILE locally through the sandbox")
    grade.add_argument("exercise", help="e.g. gradient-accumulation/accumulate")
    grade.add_argument("file")
    grade.add_argument("--locale", choices=LOCALES, default="en")
    grade.set_defaults(run=_grade)

    lessons = commands.add_parser("lessons", help="content tools")
    lessons_commands = lessons.add_subparsers(dest="lessons_command", required=True)
    check = lessons_commands.add_parser("check", help="validate all content (file:line errors)")
    check.set_defaults(run=_lessons_check)
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    sys.exit(args.run(args))


if __name__ == "__main__":
    main()
