"""Class insight at 1,000,000 submissions on PostgreSQL (issue 14): each insight query < 200 ms.

A throwaway PostgreSQL (tests/pg.py's server helpers, without pytest), migrated to the newest
schema, then bulk-loaded with COPY: `--submissions` rows from as many owners as it takes (anonymous
cookies, accounts, a few grader tokens) over the course's exercises, spread over 120 days in
four languages. Each learner works on some exercises, failing with one of the exercise's
declared diagnosis codes (or an error kind) until a pass, most often within a few attempts;
some never pass. Hints opened (before the pass, mostly) and lesson progress (last section, read,
quick check) for each learner. Then the summary tables the queries read, by the migration's
backfill (gradlab/insight_counts.py `rebuild`), and VACUUM ANALYZE, as autovacuum would.

Timed, median of `--repeat` runs (after one warm-up): each query of app/insights/service.py on
four filters (all exercises; one exercise; one exercise, then all, in one language over 30 days) and
the whole report (`compute`, every query plus the Python that shapes them). Prints a table;
`--write` appends it to bench/RESULTS.md with the date and the machine.

Usage: nice -n 19 .venv/bin/python bench/insights.py [--submissions 1000000] [--write]
"""

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text
from sqlmodel import Session, create_engine

from app.insights import service
from gradlab import insight_counts
from gradlab.config import LOCALES, PROJECT_ROOT
from gradlab.content.loader import load_content
from gradlab.db import init_db
from tests.pg import PostgresServer, _unprivileged_user, find_pg_bin, free_port

DAYS = 120
END = datetime(2026, 12, 1, tzinfo=UTC).timestamp()
START = END - DAYS * 86400
ERROR_KINDS = ["syntax_error", "runtime_error", "timeout", "memory_limit"]
CODE = "for step, (x, y) in enumerate(loader):\n    loss = loss_fn(model(x), y) / accum_steps\n" * 3


def _copy(connection, table: str, columns: list[str], rows) -> int:  # type: ignore[no-untyped-def]
    count = 0
    with (
        connection.cursor() as cursor,
        cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)
            count += 1
    return count


def generate(url: str, *, submissions: int, mean_budget: float, seed: int) -> dict[str, int]:
    """Bulk-load the synthetic class; returns the row counts."""
    import psycopg

    content = load_content(PROJECT_ROOT / "lessons")
    rng = random.Random(seed)
    exercises = service.course_exercises(content)
    codes = {ref: list(content.exercises[ref].spec.messages.diagnoses) for ref in exercises}
    hint_counts = {
        ref: len(
            content.lessons[content.exercises[ref].lesson]
            .texts["en"]
            .exercises[content.exercises[ref].spec.id]
            .hints
        )
        for ref in exercises
    }
    subs: list[tuple] = []
    hints: list[tuple] = []
    progress: list[tuple] = []
    owners = 0
    while len(subs) < submissions:  # new learners until there are enough submissions
        kind = "grader:" if owners % 100 == 0 else "user:" if owners % 5 < 2 else "learner:"
        owner = kind + uuid.uuid4().hex
        owners += 1
        locale = rng.choices(LOCALES, weights=[5, 2, 2, 1])[0]
        clock = rng.uniform(START, END - 20 * 86400)
        budget = max(1, int(rng.expovariate(1 / mean_budget)))
        done = 0
        lessons_seen: set[str] = set()
        for ref in exercises:
            if done >= budget:
                break
            lessons_seen.add(content.exercises[ref].lesson)
            skill = rng.random()
            hinted, hint_at = 0, clock + rng.uniform(30, 900)
            if rng.random() < 0.35 and hint_counts[ref]:
                hinted = rng.randint(1, hint_counts[ref])
            for attempt in range(1, budget - done + 1):
                clock += rng.expovariate(1 / 240)
                passed = rng.random() < 0.15 + 0.5 * skill + 0.1 * attempt
                if passed:
                    status, code, kind = "passed", None, None
                elif rng.random() < 0.2:
                    status, code, kind = "error", None, rng.choice(ERROR_KINDS)
                else:
                    status, code, kind = "failed", rng.choice(codes[ref] or [None]), None
                result = json.dumps({"status": status, "diagnosis": code and {"code": code}})
                subs.append(
                    (
                        uuid.uuid4().hex,
                        ref,
                        CODE,
                        locale,
                        owner,
                        status,
                        result,
                        clock,
                        clock + 1,
                        code,
                        kind,
                    )
                )
                done += 1
                if passed:
                    break
            for number in range(1, hinted + 1):
                hints.append((owner, ref, number, hint_at + number * 60))
            clock += rng.expovariate(1 / 3600)
        for lesson in lessons_seen:
            ids = service.section_ids(content, lesson)
            reached = rng.randint(0, len(ids) - 1)
            read = reached == len(ids) - 1 or rng.random() < 0.3
            progress.append((owner, lesson, read, rng.random() < 0.6, ids[reached], clock, clock))
    subs = subs[:submissions]
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as connection:
        counts = {
            "owners": owners,
            "submission": _copy(
                connection,
                "submission",
                [
                    "id",
                    "exercise",
                    "code",
                    "locale",
                    "owner",
                    "status",
                    "result_json",
                    "created_at",
                    "finished_at",
                    "diagnosis_code",
                    "error_kind",
                ],
                subs,
            ),
            "hint_open": _copy(
                connection, "hint_open", ["owner", "exercise", "hint", "opened_at"], hints
            ),
            "lessonprogress": _copy(
                connection,
                "lessonprogress",
                [
                    "owner",
                    "lesson",
                    "read",
                    "quiz_passed",
                    "last_section",
                    "section_at",
                    "updated_at",
                ],
                progress,
            ),
        }
        connection.commit()
    # the summary tables the queries read, as the migration's backfill makes them (a live
    # server keeps them as it stores each submission, result and hint)
    started = time.perf_counter()
    engine = create_engine(url)
    with Session(engine) as session:
        insight_counts.rebuild(session)
        session.commit()
        for table in ("insight_count", "insight_learner"):
            counts[table] = session.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()
    engine.dispose()
    counts["rebuild_s"] = round(time.perf_counter() - started)
    # a fresh connection: VACUUM must see no snapshot older than the load to mark the pages
    # all-visible (else every index-only scan fetches the heap)
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        c.execute("VACUUM (ANALYZE)")
    return counts


def _median_ms(run, repeat: int) -> float:  # type: ignore[no-untyped-def]
    run()  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(url: str, *, repeat: int) -> list[tuple[str, str, float]]:
    content = load_content(PROJECT_ROOT / "lessons")
    exercise = "gradient-accumulation/accumulate"
    last = datetime.fromtimestamp(END, UTC).date()
    scenarios = {
        "all exercises": service.Filters(),
        "one exercise": service.Filters(exercise=exercise),
        "one exercise, es, 30 days": service.Filters(
            exercise=exercise, locale="es", since=last - timedelta(days=30), until=last
        ),
        "all exercises, es, 30 days": service.Filters(
            locale="es", since=last - timedelta(days=30), until=last
        ),
    }
    engine = create_engine(url)
    rows = []
    with Session(engine) as session:
        for label, filters in scenarios.items():
            lesson = content.exercises[exercise].lesson if filters.exercise else None
            for name in service.QUERY_NAMES:
                ms = _median_ms(
                    lambda name=name, filters=filters, lesson=lesson: service.run_query(
                        session=session, name=name, filters=filters, lesson=lesson
                    ),
                    repeat,
                )
                rows.append((label, name, ms))
            ms = _median_ms(
                lambda filters=filters: service.compute(
                    session=session, content=content, filters=filters
                ),
                repeat,
            )
            rows.append((label, "whole report (compute)", ms))
    engine.dispose()
    return rows


def explain(url: str) -> None:
    """The plans of the all-exercises queries, with their timings."""
    engine = create_engine(url)
    with engine.connect() as connection:
        for name, sql in service.QUERIES.items():
            plan = connection.execute(
                text("EXPLAIN (ANALYZE, BUFFERS) " + sql(service.Filters())),
                {**service._params(service.Filters()), "lesson": None},
            ).all()
            print(f"--- {name}\n" + "\n".join(row[0] for row in plan))
    engine.dispose()


def table(rows: list[tuple[str, str, float]]) -> str:
    lines = ["| filter | query | median ms |", "| --- | --- | --- |"]
    lines += [f"| {label} | `{name}` | {ms:.1f} |" for label, name, ms in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=1_000_000)
    parser.add_argument(
        "--attempts", type=float, default=20, help="mean submissions a learner would make"
    )
    parser.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE each query")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--write", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()

    run_as = _unprivileged_user()
    root = Path(tempfile.mkdtemp(prefix="gradlab-insights-pg-"))
    if run_as is not None:
        shutil.chown(root, run_as, run_as)
    server = PostgresServer(bin_dir=find_pg_bin(), root=root, port=free_port(), run_as=run_as)
    server.start()
    try:
        server.execute("CREATE DATABASE insights")
        url = server.url("insights")
        engine = create_engine(url)
        init_db(engine)
        engine.dispose()
        started = time.perf_counter()
        counts = generate(
            url, submissions=args.submissions, mean_budget=args.attempts, seed=args.seed
        )
        loaded_s = time.perf_counter() - started
        print(f"loaded {counts} in {loaded_s:.0f} s", flush=True)
        rows = measure(url, repeat=args.repeat)
        if args.explain:
            explain(url)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    report = table(rows)
    print(report)
    if args.write:
        machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"
        header = (
            f"\n\n## Class insight at {counts['submission']:,} submissions "
            f"(`bench/insights.py`, issue 14)\n\n"
            f"{date.today().isoformat()}, {machine}; PostgreSQL from {server.bin_dir} "
            f"(tests/pg.py's settings: shared_buffers 64MB, fsync off), run under `nice -n 19` "
            f"on the shared development VM. {counts['owners']:,} owners (1% grader tokens, left "
            f"out of the figures), {counts['hint_open']:,} hints opened, "
            f"{counts['lessonprogress']:,} lesson progress rows; loaded with COPY, summarized "
            f"by the migration's backfill into {counts['insight_count']:,} `insight_count` and "
            f"{counts['insight_learner']:,} `insight_learner` rows in {counts['rebuild_s']} s, "
            f"then VACUUM ANALYZE: {loaded_s:.0f} s in all. Median of {args.repeat} runs after "
            f"a warm-up.\n\n"
        )
        with (PROJECT_ROOT / "bench" / "RESULTS.md").open("a", encoding="utf-8") as out:
            out.write(header + report + "\n")


if __name__ == "__main__":
    main()
