"""Class insight, computed by SQL that runs on SQLite and PostgreSQL alike, over the summary
tables that storing a submission, a result or a hint keeps (gradlab/insight_counts.py), never
over the submissions themselves:

- per-submission counts (submissions, graded, passed, diagnosis codes, error kinds) are sums of
  `insight_count` over the days and language asked for: exact for any filter;
- per-learner figures belong to the learner's first submission of the exercise: `learners`,
  `learners_passed` and the percentiles of attempts, hints and seconds to the first pass are
  over the learners whose first submission falls in the period and is in the language asked
  for (their first pass may come later); `learners_with_hints` counts those who opened their
  first hint in the period. Attempts and hints are histograms in `insight_count`; seconds are
  ranked in SQL over `ix_insight_learner_seconds`. Nearest-rank percentiles, in SQL.

Submissions and hints of grader tokens are never counted: one token stands for many people.
"""

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import text
from sqlmodel import Session

from app.insights.schemas import ExerciseInsight, InsightsPublic, LessonInsight, Spread
from gradlab import insight_counts
from gradlab.content.loader import Content


@dataclass(frozen=True)
class Filters:
    exercise: str | None = None
    locale: str | None = None
    since: date | None = None
    until: date | None = None  # inclusive

    def bounds(self) -> tuple[float | None, float | None]:
        """[start, end) in unix seconds (UTC days)."""
        start = datetime.combine(self.since, time(), UTC).timestamp() if self.since else None
        end = (
            datetime.combine(self.until + timedelta(days=1), time(), UTC).timestamp()
            if self.until
            else None
        )
        return start, end


def _count_where(filters: Filters, *, locale: bool = True) -> str:
    """The filters over `insight_count AS c` (bind parameters :exercise, :locale, :first_day,
    :last_day); `hinted` counts are in no language."""
    clauses = []
    if filters.exercise:
        clauses.append("c.exercise = :exercise")
    if filters.locale and locale:
        clauses.append("(c.locale = :locale OR c.metric = 'hinted')")
    if filters.since:
        clauses.append("c.day >= :first_day")
    if filters.until:
        clauses.append("c.day <= :last_day")
    return " AND ".join(clauses) or "1 = 1"


def _params(filters: Filters) -> dict[str, Any]:
    start, end = filters.bounds()
    epoch = date(1970, 1, 1)
    return {
        "exercise": filters.exercise,
        "locale": filters.locale,
        "start": start,
        "end": end,
        "first_day": (filters.since - epoch).days if filters.since else None,
        "last_day": (filters.until - epoch).days if filters.until else None,
    }


def _totals_sql(filters: Filters) -> str:
    return f"""
        SELECT c.exercise, c.metric, CAST(SUM(c.n) AS INTEGER) AS n FROM insight_count AS c
        WHERE c.metric IN ('submissions', 'graded', 'passed', 'learners', 'learners_passed',
            'hinted') AND {_count_where(filters)}
        GROUP BY c.exercise, c.metric
    """


def _codes_sql(filters: Filters) -> str:
    return f"""
        SELECT c.exercise, c.metric AS kind, c.key AS code, SUM(c.n) AS n
        FROM insight_count AS c
        WHERE c.metric IN ('diagnosis', 'error_kind') AND {_count_where(filters)}
        GROUP BY c.exercise, c.metric, c.key
    """


def _histograms_sql(filters: Filters) -> str:
    """Per exercise, of attempts up to the first pass, hints opened before it and seconds to it
    (in buckets): the bucket of the median and of the p90 (nearest rank: the least value whose
    running count reaches ceil(p * n)), with the learners in the buckets below it."""
    return f"""
        WITH h AS (
            SELECT c.exercise, c.metric, CAST(c.key AS INTEGER) AS v,
                CAST(SUM(c.n) AS INTEGER) AS n
            FROM insight_count AS c
            WHERE c.metric IN ('attempts_to_pass', 'hints_before_pass', 'seconds_to_pass')
                AND {_count_where(filters)}
            GROUP BY c.exercise, c.metric, c.key
        ), running AS (
            SELECT exercise, metric, v, n,
                CAST(SUM(n) OVER (PARTITION BY exercise, metric ORDER BY v) AS INTEGER) AS upto,
                CAST(SUM(n) OVER (PARTITION BY exercise, metric) AS INTEGER) AS total
            FROM h WHERE n > 0
        )
        SELECT exercise, metric, MAX(total) AS total,
            MIN(CASE WHEN upto >= (total + 1) / 2 THEN v END) AS p50,
            MIN(CASE WHEN upto >= (total + 1) / 2 THEN upto - n END) AS below50,
            MIN(CASE WHEN upto >= (9 * total + 9) / 10 THEN v END) AS p90,
            MIN(CASE WHEN upto >= (9 * total + 9) / 10 THEN upto - n END) AS below90
        FROM running GROUP BY exercise, metric
    """


def _seconds_sql(filters: Filters, picks: int) -> str:
    """The exact seconds at `picks` ranks, each within its bucket: the learners of the filters
    in that bucket of that exercise, in the index's order (ix_insight_learner_seconds)."""
    clauses = ["l.exercise = :exercise_{i}", "l.seconds_to_pass >= :low_{i}"]
    clauses.append("l.seconds_to_pass < :high_{i}")
    if filters.locale:
        clauses.append("l.locale = :locale")
    if filters.since:
        clauses.append("l.first_at >= :start")
    if filters.until:
        clauses.append("l.first_at < :end")
    where = " AND ".join(clauses)
    one = (
        "SELECT {i} AS i, (SELECT l.seconds_to_pass FROM insight_learner AS l WHERE "
        + where
        + " ORDER BY l.seconds_to_pass LIMIT 1 OFFSET :offset_{i}) AS s"
    )
    return " UNION ALL ".join(one.format(i=i) for i in range(picks))


def _spreads(session: Session, filters: Filters, rows: list) -> dict[tuple[str, str], Spread]:
    """Each exercise's spreads from the histograms; seconds looked up in their buckets."""
    spreads: dict[tuple[str, str], Spread] = {}
    lookups: list[tuple[str, str, int, int]] = []  # exercise, median | p90, bucket, offset
    for row in rows:
        if row.metric != "seconds_to_pass":
            spreads[(row.exercise, row.metric)] = Spread(
                median=_number(row.p50), p90=_number(row.p90)
            )
            continue
        spreads[(row.exercise, row.metric)] = Spread(median=0, p90=0)  # ZERO buckets
        for which, rank, bucket, below in (
            ("median", (row.total + 1) // 2, row.p50, row.below50),
            ("p90", (9 * row.total + 9) // 10, row.p90, row.below90),
        ):
            if bucket != insight_counts.ZERO:
                lookups.append((row.exercise, which, int(bucket), int(rank - below - 1)))
    if lookups:
        params = _params(filters)
        for i, (exercise, _, bucket, offset) in enumerate(lookups):
            low, high = insight_counts.bucket_bounds(bucket)
            params |= {
                f"exercise_{i}": exercise,
                f"low_{i}": low,
                f"high_{i}": min(high, 1e308),
                f"offset_{i}": offset,
            }
        found = session.execute(text(_seconds_sql(filters, len(lookups))), params).all()
        for i, value in found:
            exercise, which, _, _ = lookups[i]
            spread = spreads[(exercise, "seconds_to_pass")]
            setattr(spread, which, _number(value))
    return spreads


def _lessons_sql(filters: Filters, *, by_section: bool) -> str:
    """Lesson progress by the day of its last update (lessons are not split by language)."""
    where = _count_where(Filters(since=filters.since, until=filters.until))
    if filters.exercise:
        where += " AND c.exercise = :lesson"
    if by_section:
        return f"""
            SELECT c.exercise AS lesson, c.key AS last_section, CAST(SUM(c.n) AS INTEGER) AS n
            FROM insight_count AS c WHERE c.metric = 'lesson_section' AND {where}
            GROUP BY c.exercise, c.key
        """
    return f"""
        SELECT c.exercise AS lesson,
            CAST(SUM(CASE WHEN c.metric = 'lesson_learners' THEN c.n ELSE 0 END) AS INTEGER)
                AS learners,
            CAST(SUM(CASE WHEN c.metric = 'lesson_read' THEN c.n ELSE 0 END) AS INTEGER) AS read,
            CAST(SUM(CASE WHEN c.metric = 'lesson_quiz' THEN c.n ELSE 0 END) AS INTEGER)
                AS quiz_passed
        FROM insight_count AS c
        WHERE c.metric IN ('lesson_learners', 'lesson_read', 'lesson_quiz') AND {where}
        GROUP BY c.exercise
    """


QUERIES = {
    "totals": _totals_sql,
    "codes": _codes_sql,
    "histograms": _histograms_sql,
    "lesson_totals": lambda f: _lessons_sql(f, by_section=False),
    "lesson_sections": lambda f: _lessons_sql(f, by_section=True),
}
"""Each insight query by name (bench/insights.py times them one by one)."""
QUERY_NAMES = (*QUERIES, "spreads")  # spreads: the histograms, then the seconds in their buckets


def run_query(*, session: Session, name: str, filters: Filters, lesson: str | None = None) -> list:
    """The rows of one insight query ("spreads": the histograms and the seconds looked up)."""
    if name == "spreads":
        return list(
            _spreads(
                session, filters, run_query(session=session, name="histograms", filters=filters)
            ).items()
        )
    params = {**_params(filters), "lesson": lesson}
    return list(session.execute(text(QUERIES[name](filters)), params).all())


def _number(value: Any) -> float | None:
    if value is None:
        return None
    as_float = float(value)
    return int(as_float) if as_float.is_integer() else round(as_float, 3)


def _ordered(declared: list[str], counts: dict[str, int]) -> dict[str, int]:
    """Every declared key (zero when unseen) and any other seen, most frequent first."""
    keys = list(dict.fromkeys([*declared, *counts]))
    order = {key: i for i, key in enumerate(keys)}
    return {k: counts.get(k, 0) for k in sorted(keys, key=lambda k: (-counts.get(k, 0), order[k]))}


def course_exercises(content: Content) -> list[str]:
    """Every exercise, in course order."""
    return [
        f"{entry.id}/{exercise.id}"
        for entry in content.course.lessons
        if entry.id in content.lessons
        for exercise in content.lessons[entry.id].spec.exercises
        if f"{entry.id}/{exercise.id}" in content.exercises
    ]


def section_ids(content: Content, lesson: str) -> list[str]:
    spec = content.lessons[lesson].spec
    return [s.id for s in spec.sections] + [f"exercise-{e.id}" for e in spec.exercises]


def compute(*, session: Session, content: Content, filters: Filters) -> InsightsPublic:
    """Class insight for `filters`: every exercise of the course (or the one asked for), and
    the lessons they belong to. The exercise must exist (the caller checks)."""
    exercises = [filters.exercise] if filters.exercise else course_exercises(content)
    lesson_of = {ref: content.exercises[ref].lesson for ref in exercises}
    only_lesson = lesson_of[filters.exercise] if filters.exercise else None

    def rows(name: str) -> list:
        return run_query(session=session, name=name, filters=filters, lesson=only_lesson)

    totals: dict[tuple[str, str], int] = {}
    for row in rows("totals"):
        totals[(row.exercise, row.metric)] = int(row.n or 0)
    codes: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows("codes"):
        if row.n:
            codes.setdefault((row.exercise, row.kind), {})[row.code] = int(row.n)
    spreads = _spreads(session, filters, rows("histograms"))

    items = []
    for ref in exercises:

        def total(metric: str, ref: str = ref) -> int:
            return totals.get((ref, metric), 0)

        graded, passed = total("graded"), total("passed")
        spec = content.exercises[ref].spec
        items.append(
            ExerciseInsight(
                exercise=ref,
                lesson=lesson_of[ref],
                submissions=total("submissions"),
                graded=graded,
                passed=passed,
                pass_rate=round(passed / graded, 4) if graded else None,
                learners=total("learners"),
                learners_passed=total("learners_passed"),
                diagnoses=_ordered(
                    list(spec.messages.diagnoses), codes.get((ref, "diagnosis"), {})
                ),
                error_kinds=_ordered([], codes.get((ref, "error_kind"), {})),
                attempts_to_pass=spreads.get((ref, "attempts_to_pass"), Spread()),
                hints_before_pass=spreads.get((ref, "hints_before_pass"), Spread()),
                seconds_to_pass=spreads.get((ref, "seconds_to_pass"), Spread()),
                learners_with_hints=total("hinted"),
            )
        )

    lesson_ids = [only_lesson] if only_lesson else [e.id for e in content.course.lessons]
    lesson_ids = [lesson for lesson in lesson_ids if lesson in content.lessons]
    lesson_totals = {row.lesson: row for row in rows("lesson_totals")}
    sections: dict[str, dict[str, int]] = {}
    for row in rows("lesson_sections"):
        if row.n:  # a counter back at 0: nobody's last section any more
            sections.setdefault(row.lesson, {})[row.last_section] = int(row.n)
    lessons = []
    for lesson in lesson_ids:
        row = lesson_totals.get(lesson)
        seen = sections.get(lesson, {})
        ids = section_ids(content, lesson)
        ids += sorted(set(seen) - set(ids))  # sections the lesson no longer has
        lessons.append(
            LessonInsight(
                lesson=lesson,
                learners=int(row.learners) if row else 0,
                read=int(row.read or 0) if row else 0,
                quiz_passed=int(row.quiz_passed or 0) if row else 0,
                last_section={
                    key: seen.get(key, 0) for key in [*ids, *sorted(set(seen) - set(ids))]
                },
            )
        )
    return InsightsPublic(
        exercise=filters.exercise,
        locale=filters.locale,
        since=filters.since,
        until=filters.until,
        generated_at=datetime.now(UTC),
        exercises=items,
        lessons=lessons,
    )
