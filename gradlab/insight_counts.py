"""Class insight's summary tables (`insight_count`, `insight_learner`; app/insights reads them),
kept in the transaction that writes what they summarize, on SQLite and PostgreSQL alike:

- a submission stored (gradlab/queue.py `stage`): `submissions` +1 on its day and language; the
  learner's summary row is made on their first submission of the exercise (`learners` +1);
- a result stored (`_store_result`): `graded`, `passed`, the diagnosis code or error kind +1; a
  first pass fills the learner's row (`learners_passed` and the histograms of attempts and
  hints before the pass +1, on the day and language of the learner's first submission);
- hint 1 opened (app/insights/hints.py): `hinted` +1 on its day;
- re-owning (app/accounts/adopt.py): both learners' rows are taken out and the account's are
  made again from its submissions and hints (`reown`).

A learner's row is always what `_learner` computes from the submission and hint_open rows, and
every counter moves by the difference between a row's old and new contributions, so the counts
stay equal to `rebuild` (the migration's backfill; tests compare them). Grader tokens count
nowhere: one token stands for many people.
"""

import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, select

from gradlab.models import HintOpen, InsightLearner, LessonProgress, Submission

DAY_S = 86400
GRADED = ("passed", "failed", "error")
PER_SUBMISSION = ("submissions", "graded", "passed", "diagnosis", "error_kind")
HISTOGRAMS = ("attempts_to_pass", "hints_before_pass", "seconds_to_pass")

Key = tuple[str, int, str, str, str]  # exercise, day, locale, metric, key


SECONDS_LOW, SECONDS_HIGH, ZERO = -10, 30, -1000  # buckets of seconds to pass: powers of two


def seconds_bucket(seconds: float) -> int:
    """`k` for [2**k, 2**(k+1)), clamped to SECONDS_LOW..SECONDS_HIGH; ZERO for 0 (a pass at
    the first submission)."""
    if seconds <= 0:
        return ZERO
    return min(max(math.frexp(seconds)[1] - 1, SECONDS_LOW), SECONDS_HIGH)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """[low, high) of a seconds bucket (not ZERO)."""
    low = math.ulp(0.0) if bucket == SECONDS_LOW else 2.0**bucket
    return low, (math.inf if bucket == SECONDS_HIGH else 2.0 ** (bucket + 1))


def _seconds_bucket_sql(column: str) -> str:
    ladder = " ".join(
        f"WHEN {column} < {2.0 ** (k + 1)!r} THEN {k}" for k in range(SECONDS_LOW, SECONDS_HIGH)
    )
    return f"CASE WHEN {column} <= 0 THEN {ZERO} {ladder} ELSE {SECONDS_HIGH} END"


def day_of(at: float) -> int:
    """The UTC day of a unix time, as days since 1970-01-01."""
    return int(at // DAY_S)


def counted(owner: str) -> bool:
    return not owner.startswith("grader:")


# The same upsert on both databases (SQLite >= 3.24 and PostgreSQL >= 9.5 spell it alike); one
# prepared text, executed with every delta at once: a counter row is locked until the commit.
_BUMP = text(
    "INSERT INTO insight_count (metric, exercise, day, locale, key, n) "
    "VALUES (:metric, :exercise, :day, :locale, :key, :n) "
    "ON CONFLICT (metric, exercise, day, locale, key) "
    "DO UPDATE SET n = insight_count.n + excluded.n"
)


def bump(session: Session, deltas: Counter[Key]) -> None:
    """Add each delta to its counter (in key order: concurrent writers lock rows alike)."""
    rows = [
        {"exercise": exercise, "day": day, "locale": locale, "metric": metric, "key": key, "n": n}
        for (exercise, day, locale, metric, key), n in sorted(deltas.items())
        if n
    ]
    if rows:
        session.execute(_BUMP, rows)


def _contributions(row: InsightLearner | None) -> Counter[Key]:
    """The counters one learner's row adds to."""
    if row is None:
        return Counter()
    day = day_of(row.first_at)
    base = (row.exercise, day, row.locale)
    keys: Counter[Key] = Counter([(*base, "learners", "")])
    if row.passed_at is not None:
        keys[(*base, "learners_passed", "")] += 1
        keys[(*base, "attempts_to_pass", str(row.attempts_to_pass))] += 1
        keys[(*base, "hints_before_pass", str(row.hints_before_pass))] += 1
        bucket = seconds_bucket(row.passed_at - row.first_at)
        keys[(*base, "seconds_to_pass", str(bucket))] += 1
    return keys


def _learner(session: Session, exercise: str, owner: str) -> InsightLearner | None:
    """The learner's row as their submissions and hints make it (None: no submission)."""
    ours = (Submission.exercise == exercise, Submission.owner == owner)
    first = session.exec(
        select(Submission.created_at, Submission.locale)
        .where(*ours)
        .order_by(Submission.created_at, Submission.id)  # type: ignore[arg-type]
        .limit(1)
    ).first()
    if first is None:
        return None
    row = InsightLearner(exercise=exercise, owner=owner, first_at=first[0], locale=first[1])
    passed_at = session.execute(
        text(
            "SELECT MIN(created_at) FROM submission "
            "WHERE exercise = :e AND owner = :o AND status = 'passed'"
        ),
        {"e": exercise, "o": owner},
    ).scalar()
    if passed_at is not None:
        params = {"e": exercise, "o": owner, "at": passed_at}
        row.passed_at = passed_at
        row.seconds_to_pass = passed_at - row.first_at
        row.attempts_to_pass = session.execute(
            text(
                "SELECT COUNT(*) FROM submission "
                "WHERE exercise = :e AND owner = :o AND created_at <= :at"
            ),
            params,
        ).scalar_one()
        row.hints_before_pass = session.execute(
            text(
                "SELECT COUNT(*) FROM hint_open "
                "WHERE exercise = :e AND owner = :o AND opened_at <= :at"
            ),
            params,
        ).scalar_one()
    return row


def _stored(session: Session, exercise: str, owner: str) -> InsightLearner | None:
    return session.exec(
        select(InsightLearner)
        .where(InsightLearner.exercise == exercise, InsightLearner.owner == owner)
        .with_for_update()
    ).first()


FIELDS = ("first_at", "locale", "passed_at", "attempts_to_pass", "hints_before_pass")


_PASSED_AT = text("SELECT passed_at FROM insight_learner WHERE exercise = :e AND owner = :o")


def _passed_at(session: Session, submission: Submission) -> Any:
    """The learner's row as (passed_at,), or None when they have none yet."""
    return session.execute(_PASSED_AT, {"e": submission.exercise, "o": submission.owner}).first()


def _dialect(session: Session) -> Any:
    return postgresql if session.get_bind().dialect.name == "postgresql" else sqlite


def refresh(session: Session, exercise: str, owner: str) -> None:
    """Make the learner's row again from their submissions and hints; move the counters."""
    if not counted(owner):
        return
    old = _stored(session, exercise, owner)
    new = _learner(session, exercise, owner)
    if (
        old is not None
        and new is not None
        and all(getattr(old, f) == getattr(new, f) for f in FIELDS)
    ):
        return
    deltas = _contributions(new)
    deltas.subtract(_contributions(old))  # before `old` takes the new values
    if old is None and new is not None:
        values = {name: getattr(new, name) for name in ("exercise", "owner", *FIELDS)}
        values["seconds_to_pass"] = new.seconds_to_pass
        table = InsightLearner.__table__  # type: ignore[attr-defined]
        statement = _dialect(session).insert(table).values(**values)
        inserted = session.execute(
            statement.on_conflict_do_nothing().returning(table.c.owner)
        ).first()
        if inserted is None:  # a concurrent first submission made it: now it is there, locked
            refresh(session, exercise, owner)
            return
    elif old is not None and new is None:
        session.delete(old)
    elif old is not None and new is not None:
        for name in (*FIELDS, "seconds_to_pass"):
            setattr(old, name, getattr(new, name))
        session.add(old)
    session.flush()
    bump(session, deltas)


def submitted(session: Session, submission: Submission) -> None:
    """A new submission (flushed): counted, and the learner's row made on their first one."""
    if not counted(submission.owner):
        return
    day = day_of(submission.created_at)
    bump(session, Counter([(submission.exercise, day, submission.locale, "submissions", "")]))
    if _passed_at(session, submission) is None:
        refresh(session, submission.exercise, submission.owner)


def result_keys(submission: Submission) -> Counter[Key]:
    """The counters a submission's result adds to (none before it has one)."""
    if submission.status not in GRADED:
        return Counter()
    base = (submission.exercise, day_of(submission.created_at), submission.locale)
    keys: Counter[Key] = Counter([(*base, "graded", "")])
    if submission.status == "passed":
        keys[(*base, "passed", "")] += 1
    if submission.diagnosis_code is not None:
        keys[(*base, "diagnosis", submission.diagnosis_code)] += 1
    if submission.error_kind is not None:
        keys[(*base, "error_kind", submission.error_kind)] += 1
    return keys


def graded(session: Session, submission: Submission, before: Counter[Key]) -> None:
    """A result stored on `submission` (whose `result_keys` were `before`): its counters move,
    and a pass earlier than the learner's first so far makes their row again."""
    if not counted(submission.owner):
        return
    deltas = result_keys(submission)
    deltas.subtract(before)
    bump(session, deltas)
    if submission.status == "passed":
        row = _passed_at(session, submission)
        if row is None or row.passed_at is None or submission.created_at < row.passed_at:
            refresh(session, submission.exercise, submission.owner)


def hint_opened(session: Session, owner: str, exercise: str, opened_at: float) -> None:
    """Hint 1 of an exercise opened for the first time: one more learner with hints."""
    if counted(owner):
        bump(session, Counter([(exercise, day_of(opened_at), "", "hinted", "")]))


def _first_hints(session: Session, owners: Iterable[str]) -> Counter[Key]:
    rows = session.exec(
        select(HintOpen.exercise, HintOpen.opened_at).where(
            HintOpen.owner.in_([o for o in owners if counted(o)]),  # type: ignore[attr-defined]
            HintOpen.hint == 1,
        )
    ).all()
    return Counter((exercise, day_of(at), "", "hinted", "") for exercise, at in rows)


def reown(session: Session, source: str, target: str, move: Callable[[], None]) -> None:
    """`move` gives `source`'s submissions and hints to `target`; the summaries follow: both
    learners' rows are made again (the source's vanish) and the counters move."""
    exercises = set(
        session.exec(select(InsightLearner.exercise).where(InsightLearner.owner == source)).all()
    )
    exercises |= set(
        session.exec(select(Submission.exercise).where(Submission.owner == source)).all()
    )
    deltas = Counter[Key]()
    deltas.subtract(_first_hints(session, (source, target)))
    move()
    session.flush()
    deltas.update(_first_hints(session, (source, target)))
    bump(session, deltas)
    for exercise in sorted(exercises):
        refresh(session, exercise, source)
        refresh(session, exercise, target)


# --- lesson progress: counted on the day of its last update (the insight's period) ------------


def lesson_keys(rows: Iterable[LessonProgress]) -> Counter[Key]:
    """The counters lesson progress rows add to: learners, read, quick check, last section."""
    keys: Counter[Key] = Counter()
    for row in rows:
        if not counted(row.owner):
            continue
        base = (row.lesson, day_of(row.updated_at), "")
        keys[(*base, "lesson_learners", "")] += 1
        if row.read:
            keys[(*base, "lesson_read", "")] += 1
        if row.quiz_passed:
            keys[(*base, "lesson_quiz", "")] += 1
        if row.last_section is not None:
            keys[(*base, "lesson_section", row.last_section)] += 1
    return keys


def progress_changed(
    session: Session, before: Counter[Key], rows: Iterable[LessonProgress]
) -> None:
    """Lesson progress rows written (flushed) whose `lesson_keys` were `before`."""
    deltas = lesson_keys(rows)
    deltas.subtract(before)
    bump(session, deltas)


# --- the backfill: both tables from the submission and hint_open rows -------------------------


def _day_sql(column: str, dialect: str) -> str:
    if dialect == "postgresql":  # a cast of a double rounds there; FLOOR first
        return f"CAST(FLOOR({column} / {DAY_S}) AS INTEGER)"
    return f"CAST({column} / {DAY_S} AS INTEGER)"  # truncates: times after 1970 are positive


def rebuild_statements(dialect: str) -> list[str]:
    """The SQL that fills both tables from scratch (the migration's backfill, `rebuild`)."""
    counted_sql = "owner NOT LIKE 'grader:%'"
    day = _day_sql("created_at", dialect)
    first_day = _day_sql("first_at", dialect)
    graded_sql = "status IN ('passed', 'failed', 'error')"

    def per_submission(metric: str, key: str, where: str) -> str:
        return (
            f"SELECT exercise, {day}, locale, '{metric}', {key}, COUNT(*) FROM submission "
            f"WHERE {counted_sql} AND {where} GROUP BY exercise, {day}, locale"
            + (f", {key}" if key != "''" else "")
        )

    def per_learner(metric: str, key: str, where: str) -> str:
        key_sql = f"CAST({key} AS VARCHAR(20))" if key != "''" else "''"
        return (
            f"SELECT exercise, {first_day}, locale, '{metric}', {key_sql}, COUNT(*) "
            f"FROM insight_learner WHERE {where} GROUP BY exercise, {first_day}, locale"
            + (f", {key}" if key != "''" else "")
        )

    def per_progress(metric: str, key: str, where: str) -> str:
        updated = _day_sql("updated_at", dialect)
        return (
            f"SELECT lesson, {updated}, '', '{metric}', {key}, COUNT(*) FROM lessonprogress "
            f"WHERE {counted_sql} AND {where} GROUP BY lesson, {updated}"
            + (f", {key}" if key != "''" else "")
        )

    return [
        "DELETE FROM insight_count",
        "DELETE FROM insight_learner",
        f"""INSERT INTO insight_learner (exercise, owner, first_at, locale, passed_at)
            SELECT exercise, owner, created_at, locale, passed_at FROM (
                SELECT exercise, owner, created_at, locale,
                    MIN(CASE WHEN status = 'passed' THEN created_at END)
                        OVER (PARTITION BY exercise, owner) AS passed_at,
                    ROW_NUMBER() OVER (PARTITION BY exercise, owner ORDER BY created_at, id) AS r
                FROM submission WHERE {counted_sql}
            ) AS ranked WHERE r = 1""",
        """UPDATE insight_learner SET
            attempts_to_pass = (SELECT COUNT(*) FROM submission AS s
                WHERE s.exercise = insight_learner.exercise AND s.owner = insight_learner.owner
                  AND s.created_at <= insight_learner.passed_at),
            hints_before_pass = (SELECT COUNT(*) FROM hint_open AS h
                WHERE h.exercise = insight_learner.exercise AND h.owner = insight_learner.owner
                  AND h.opened_at <= insight_learner.passed_at),
            seconds_to_pass = passed_at - first_at
            WHERE passed_at IS NOT NULL""",
        "INSERT INTO insight_count (exercise, day, locale, metric, key, n) "
        + " UNION ALL ".join(
            [
                per_submission("submissions", "''", "1 = 1"),
                per_submission("graded", "''", graded_sql),
                per_submission("passed", "''", "status = 'passed'"),
                per_submission("diagnosis", "diagnosis_code", "diagnosis_code IS NOT NULL"),
                per_submission("error_kind", "error_kind", "error_kind IS NOT NULL"),
                per_learner("learners", "''", "1 = 1"),
                per_learner("learners_passed", "''", "passed_at IS NOT NULL"),
                per_learner("attempts_to_pass", "attempts_to_pass", "passed_at IS NOT NULL"),
                per_learner("hints_before_pass", "hints_before_pass", "passed_at IS NOT NULL"),
                per_learner(
                    "seconds_to_pass",
                    _seconds_bucket_sql("seconds_to_pass"),
                    "passed_at IS NOT NULL",
                ),
                f"SELECT exercise, {_day_sql('opened_at', dialect)}, '', 'hinted', '', "
                f"COUNT(*) FROM hint_open WHERE {counted_sql} AND hint = 1 "
                f"GROUP BY exercise, {_day_sql('opened_at', dialect)}",
                per_progress("lesson_learners", "''", "1 = 1"),
                per_progress("lesson_read", "''", "read"),
                per_progress("lesson_quiz", "''", "quiz_passed"),
                per_progress("lesson_section", "last_section", "last_section IS NOT NULL"),
            ]
        ),
    ]


def rebuild(connection: Connection | Session) -> None:
    """Both tables again from the submissions and hints (the caller commits)."""
    bind: Any = connection.get_bind() if isinstance(connection, Session) else connection
    for statement in rebuild_statements(bind.dialect.name):
        connection.execute(text(statement))
