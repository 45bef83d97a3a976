"""Class insight (issue 14): figures computed by hand on a small class, on SQLite and
PostgreSQL; who may see them; CSV = JSON; the page in four languages without a learner's id;
hints opened; the migration's backfill; the instructor CLI."""

import csv
import io
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlmodel import Session, select

from app.i18n import gettext
from gradlab import insight_counts, queue, tokens
from gradlab.config import LOCALES, PROJECT_ROOT
from gradlab.db import init_db, migration_config
from gradlab.instructors import set_instructor
from gradlab.models import HintOpen, LessonProgress, Submission
from gradlab.results import Check, Diagnosis, GradeResult, ResultError
from tests.pg import both_databases
from tests.test_accounts import bearer, register

A = "gradient-accumulation/accumulate"
B = "gradient-accumulation/last-partial-cycle"
LESSON = "gradient-accumulation"
T = datetime(2026, 11, 10, 12, 0, tzinfo=UTC).timestamp()
DAY = 86400.0
OWNERS = ("learner:aaaa1111", "user:bbbb2222", "user:cccc3333", "learner:dddd4444")

# (owner, exercise, seconds after T, status, diagnosis, error kind, locale)
CLASS = [
    ("learner:aaaa1111", A, 0, "failed", "loss_not_scaled", None, "en"),
    ("learner:aaaa1111", A, 60, "failed", "loss_not_scaled", None, "en"),
    ("learner:aaaa1111", A, 120, "passed", None, None, "en"),
    ("learner:aaaa1111", A, 200, "failed", "wrong_loss_scale", None, "en"),  # after the pass
    ("user:bbbb2222", A, 10, "error", None, "syntax_error", "en"),
    ("user:bbbb2222", A, 70, "passed", None, None, "en"),
    ("user:cccc3333", A, 5, "passed", None, None, "es"),
    ("learner:dddd4444", A, 20, "failed", "zeroed_every_microbatch", None, "de"),
    ("learner:dddd4444", A, 30, "failed", "loss_not_scaled", None, "de"),
    ("learner:eeee5555", A, 40, "queued", None, None, "en"),
    ("grader:1", A, 50, "passed", None, None, "en"),  # a grader token: left out
    ("learner:aaaa1111", B, 3 * DAY, "passed", None, None, "en"),
]
# (owner, exercise, hint, seconds after T)
HINTS = [
    ("learner:aaaa1111", A, 1, 30),
    ("learner:aaaa1111", A, 2, 90),  # both before a's pass at 120
    ("user:bbbb2222", A, 1, 500),  # after b's pass at 70
    ("learner:dddd4444", A, 1, 25),
    ("learner:dddd4444", A, 2, 26),
]


def _load(engine) -> None:  # type: ignore[no-untyped-def]
    from tests.test_progress import SPEC

    sections = [s["id"] for s in SPEC["sections"]]
    with Session(engine) as session:
        for owner, exercise, at, status, code, kind, locale in CLASS:
            session.add(
                Submission(
                    exercise=exercise,
                    code="x",
                    locale=locale,
                    owner=owner,
                    status=status,
                    created_at=T + at,
                    diagnosis_code=code,
                    error_kind=kind,
                )
            )
        for owner, exercise, hint, at in HINTS:
            session.add(HintOpen(owner=owner, exercise=exercise, hint=hint, opened_at=T + at))
        for owner, read, quiz, section in [
            ("learner:aaaa1111", True, True, sections[-1]),
            ("user:bbbb2222", False, False, sections[0]),
            ("grader:1", True, True, sections[0]),
        ]:
            session.add(
                LessonProgress(
                    owner=owner,
                    lesson=LESSON,
                    read=read,
                    quiz_passed=quiz,
                    last_section=section,
                    updated_at=T,
                )
            )
        session.flush()
        insight_counts.rebuild(session)  # the rows above bypass the queue that keeps them
        session.commit()


@pytest.fixture
def grader(client: TestClient) -> dict[str, str]:
    """The class loaded, and a grader token's headers."""
    _load(client.app.state.engine)  # type: ignore[attr-defined]
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        return bearer(tokens.create(session=session, name="lms").token)


def _exercise(body: dict, ref: str) -> dict:
    return next(item for item in body["exercises"] if item["exercise"] == ref)


@both_databases
def test_figures_match_a_class_counted_by_hand(client: TestClient, grader: dict[str, str]) -> None:
    body = client.get("/api/v1/insights", headers=grader).json()
    a = _exercise(body, A)
    assert a["submissions"] == 10 and a["graded"] == 9 and a["passed"] == 3
    assert a["pass_rate"] == pytest.approx(0.3333)
    assert a["learners"] == 5 and a["learners_passed"] == 3
    assert a["diagnoses"]["loss_not_scaled"] == 3
    assert a["diagnoses"]["zeroed_every_microbatch"] == 1
    assert a["diagnoses"]["wrong_loss_scale"] == 1
    assert a["diagnoses"]["never_stepped"] == 0  # every declared code is named
    assert next(iter(a["diagnoses"])) == "loss_not_scaled"  # most frequent first
    assert a["error_kinds"] == {"syntax_error": 1}
    # attempts up to the first pass: a 3, b 2, c 1 -> nearest rank: median 2, p90 3
    assert a["attempts_to_pass"] == {"median": 2, "p90": 3}
    # hints before the first pass: a 2, b 0 (after), c 0 -> median 0, p90 2
    assert a["hints_before_pass"] == {"median": 0, "p90": 2}
    assert a["seconds_to_pass"] == {"median": 60, "p90": 120}
    assert a["learners_with_hints"] == 3
    b = _exercise(body, B)
    assert (b["submissions"], b["learners_passed"], b["attempts_to_pass"]["median"]) == (1, 1, 1)
    lesson = next(item for item in body["lessons"] if item["lesson"] == LESSON)
    assert (lesson["learners"], lesson["read"], lesson["quiz_passed"]) == (2, 1, 1)
    assert sum(lesson["last_section"].values()) == 2
    assert next(iter(lesson["last_section"].values())) == 1  # page order, first section first
    assert not re.search(r"aaaa1111|bbbb2222|cccc3333|dddd4444|eeee5555", str(body))


@both_databases
def test_filters_by_exercise_locale_and_period(client: TestClient, grader: dict[str, str]) -> None:
    one = client.get("/api/v1/insights", params={"exercise": A}, headers=grader).json()
    assert [item["exercise"] for item in one["exercises"]] == [A]
    assert [item["lesson"] for item in one["lessons"]] == [LESSON]
    spanish = client.get("/api/v1/insights", params={"locale": "es"}, headers=grader).json()
    a = _exercise(spanish, A)
    assert (a["submissions"], a["learners"], a["passed"]) == (1, 1, 1)
    assert a["attempts_to_pass"] == {"median": 1, "p90": 1}
    day = datetime.fromtimestamp(T, UTC).date().isoformat()
    first_day = client.get(
        "/api/v1/insights", params={"since": day, "until": day}, headers=grader
    ).json()
    assert _exercise(first_day, A)["submissions"] == 10
    assert _exercise(first_day, B)["submissions"] == 0
    later = client.get("/api/v1/insights", params={"since": "2026-11-12"}, headers=grader).json()
    assert (_exercise(later, A)["submissions"], _exercise(later, B)["submissions"]) == (0, 1)


def test_bad_filters(client: TestClient, grader: dict[str, str]) -> None:
    def status(**params: str) -> int:
        return client.get("/api/v1/insights", params=params, headers=grader).status_code

    assert status(exercise="no/such") == 404
    assert status(locale="fr") == 422
    assert status(since="2026-13-01") == 422
    assert status(since="2026-11-02", until="2026-11-01") == 422
    assert status(format="xml") == 422


def test_who_may_see_it(client: TestClient, grader: dict[str, str]) -> None:
    assert client.get("/api/v1/insights").status_code == 401
    assert client.get("/api/v1/insights.csv").status_code == 401
    token = register(client, "teacher@example.org")
    assert client.get("/api/v1/insights", headers=bearer(token)).status_code == 403
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        assert set_instructor(session=session, email=" Teacher@Example.org ") is not None
    assert client.get("/api/v1/insights", headers=bearer(token)).status_code == 200
    assert client.get("/api/v1/insights", headers=grader).status_code == 200
    # the page: polite, in the page's language, and the right status
    client.cookies.clear()
    anonymous = client.get("/de/insights")
    assert anonymous.status_code == 401 and "/de/login?next=/de/insights" in anonymous.text
    other = register(client, "learner@example.org")
    refused = client.get("/es/insights", headers=bearer(other))
    assert refused.status_code == 403 and "gradlab user instructor EMAIL" in refused.text


def test_csv_matches_the_json(client: TestClient, grader: dict[str, str]) -> None:
    body = client.get("/api/v1/insights", headers=grader).json()
    response = client.get("/api/v1/insights.csv", headers=grader)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert 'filename="gradlab-insights.csv"' in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert set(rows[0]) == {"scope", "id", "metric", "key", "value"}
    a = {(r["metric"], r["key"]): r["value"] for r in rows if r["id"] == A}
    expected = _exercise(body, A)
    for metric in ("submissions", "graded", "passed", "learners", "learners_passed"):
        assert int(a[(metric, "")]) == expected[metric]
    assert float(a[("pass_rate", "")]) == expected["pass_rate"]
    for code, n in expected["diagnoses"].items():
        assert int(a[("diagnosis", code)]) == n
    assert int(a[("error_kind", "syntax_error")]) == 1
    assert float(a[("attempts_to_pass", "p90")]) == 3
    lesson = {(r["metric"], r["key"]): r["value"] for r in rows if r["id"] == LESSON}
    assert int(lesson[("quiz_passed", "")]) == 1
    same = client.get("/api/v1/insights", params={"format": "csv", "exercise": A}, headers=grader)
    assert "accumulate.csv" in same.headers["content-disposition"]
    assert {r["id"] for r in csv.DictReader(io.StringIO(same.text))} == {A, LESSON}


@pytest.mark.parametrize("locale", LOCALES)
def test_page_in_every_language(client: TestClient, grader: dict[str, str], locale: str) -> None:
    page = client.get(f"/{locale}/insights", params={"exercise": A}, headers=grader)
    assert page.status_code == 200
    html = page.text
    assert f'<h1 id="insights-title">{gettext(locale, "Class insight")}</h1>' in html
    assert gettext(locale, "How far learners read") in html
    assert gettext(locale, "Download as CSV") in html
    if locale != "en":
        assert gettext(locale, "Class insight") != "Class insight"
    assert html.count("<svg") == 3  # diagnoses, errors, reading
    assert ">loss_not_scaled</text>" in html
    assert not re.search(r"aaaa1111|bbbb2222|cccc3333|dddd4444|eeee5555|learner:|user:", html)
    assert " style=" not in html and "<script>" not in html  # CSP: no inline style or script
    assert f'href="/api/v1/insights.csv?exercise={A.replace("/", "%2F")}"' in html
    bad = client.get(f"/{locale}/insights", params={"since": "soon"}, headers=grader)
    assert bad.status_code == 422 and 'role="alert"' in bad.text


# --- hints opened -----------------------------------------------------------------------------


def test_hints_opened_are_recorded_and_join_the_account(client: TestClient) -> None:
    url = "/api/v1/progress/hints"
    assert client.post(url, json={"exercise": A, "hint": 2}).json() == {
        "exercise": A,
        "hints_opened": 2,
    }
    assert client.post(url, json={"exercise": A, "hint": 1}).json()["hints_opened"] == 2
    assert client.post(url, json={"exercise": A, "hint": 99}).status_code == 422
    assert client.post(url, json={"exercise": "no/such", "hint": 1}).status_code == 404
    assert client.post(url, json={"exercise": A, "hint": 0}).status_code == 422
    register(client, "ada@example.org")  # the cookie learner's hints move to the account
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        rows = session.exec(select(HintOpen.owner, HintOpen.hint)).all()
    assert sorted(hint for _, hint in rows) == [1, 2]
    assert {owner.split(":")[0] for owner, _ in rows} == {"user"}


# --- where the columns come from ----------------------------------------------------------------


@both_databases
def test_stored_results_fill_the_insight_columns(client: TestClient) -> None:
    engine = client.app.state.engine  # type: ignore[attr-defined]
    failing = GradeResult.from_checks(
        [Check(id="runs", passed=False, points=0, max_points=1, message="")]
    ).model_copy(update={"diagnosis": Diagnosis(code="loss_not_scaled", message="m")})
    crashed = GradeResult.failure(ResultError(kind="runtime_error", message="boom"))
    with Session(engine) as session:
        for result in (failing, crashed):
            queue.enqueue(session=session, exercise=A, code="x", locale="en", owner="learner:z")
            job = queue.claim(session=session, worker_id="w", lease_s=30, max_attempts=3)
            assert job is not None
            assert queue.finish(session=session, job_id=job.job_id, worker_id="w", result=result)
        stored = session.exec(
            select(Submission.diagnosis_code, Submission.error_kind).order_by(Submission.created_at)
        ).all()
    assert [tuple(row) for row in stored] == [("loss_not_scaled", None), (None, "runtime_error")]


def _summaries(engine) -> tuple[list, list]:  # type: ignore[no-untyped-def]
    """Both summary tables, in order (counters that went back to 0 left out)."""
    with engine.connect() as connection:
        counts = connection.execute(
            text(
                "SELECT exercise, day, locale, metric, key, n FROM insight_count WHERE n <> 0 "
                "ORDER BY exercise, day, locale, metric, key"
            )
        ).all()
        learners = connection.execute(
            text(
                "SELECT exercise, owner, first_at, locale, passed_at, attempts_to_pass, "
                "hints_before_pass, seconds_to_pass FROM insight_learner ORDER BY exercise, owner"
            )
        ).all()
    return [tuple(r) for r in counts], [tuple(r) for r in learners]


@both_databases
def test_summaries_follow_the_queue_hints_and_adoption(client: TestClient, content) -> None:  # type: ignore[no-untyped-def]
    """Kept by each write as the backfill makes them from scratch; re-owning merges learners."""
    from app.accounts.adopt import adopt
    from app.insights import hints
    from app.progress import service as progress
    from app.progress.schemas import ProgressUpdate

    engine = client.app.state.engine  # type: ignore[attr-defined]
    passing = GradeResult.from_checks(
        [Check(id="ok", passed=True, points=1, max_points=1, message="")]
    )
    failing = GradeResult.from_checks(
        [Check(id="runs", passed=False, points=0, max_points=1, message="")]
    ).model_copy(update={"diagnosis": Diagnosis(code="loss_not_scaled", message="m")})
    anonymous, account = "learner:anon", "user:acc"
    with Session(engine) as session:
        headers = bearer(tokens.create(session=session, name="lms").token)

        def submit(owner: str, result: GradeResult | None, exercise: str = A) -> None:
            queue.enqueue(session=session, exercise=exercise, code="x", locale="de", owner=owner)
            if result is not None:
                job = queue.claim(session=session, worker_id="w", lease_s=30, max_attempts=3)
                assert job is not None
                assert queue.finish(
                    session=session, job_id=job.job_id, worker_id="w", result=result
                )

        submit(anonymous, failing)  # the anonymous learner starts first
        hints.record(session=session, content=content, owner=anonymous, exercise=A, hint=2)
        sections = progress.section_ids(content, LESSON)
        for owner, data in (
            (anonymous, ProgressUpdate(last_section=sections[0])),
            (account, ProgressUpdate(last_section=sections[1], read=True)),
            (anonymous, ProgressUpdate(last_section=sections[2])),  # the last reported
        ):
            progress.update(session=session, content=content, owner=owner, lesson=LESSON, data=data)
        progress.record_quiz_passed(session=session, owner=anonymous, lesson=LESSON)
        submit(account, failing)
        submit(account, passing)  # the account passes at its 2nd, the merged learner at the 3rd
        submit(anonymous, passing)
        submit("grader:1", passing)  # never counted
        submit(anonymous, None, exercise=B)  # waiting: a learner of B all the same

    def a() -> dict:
        body = client.get("/api/v1/insights", params={"locale": "de"}, headers=headers).json()
        return _exercise(body, A)

    before = a()
    assert (before["submissions"], before["graded"], before["passed"]) == (4, 4, 2)
    assert (before["learners"], before["learners_passed"], before["learners_with_hints"]) == (
        2,
        2,
        1,
    )
    assert before["attempts_to_pass"] == {"median": 2, "p90": 2}
    assert before["hints_before_pass"] == {"median": 0, "p90": 2}
    lesson = client.get("/api/v1/insights", params={"exercise": A}, headers=headers).json()
    assert lesson["lessons"][0]["learners"] == 2
    assert lesson["lessons"][0]["last_section"][sections[2]] == 1
    kept = _summaries(engine)
    with Session(engine) as session:
        insight_counts.rebuild(session)
        session.commit()
    assert _summaries(engine) == kept

    with Session(engine) as session:
        adopt(session=session, learner_id="anon", user_id="acc")
    after = a()
    assert (after["submissions"], after["graded"], after["passed"]) == (4, 4, 2)
    assert (after["learners"], after["learners_passed"], after["learners_with_hints"]) == (1, 1, 1)
    # one learner: the anonymous start, the account's pass: 3 attempts, 2 hints before it
    assert after["attempts_to_pass"] == {"median": 3, "p90": 3}
    assert after["hints_before_pass"] == {"median": 2, "p90": 2}
    assert _exercise(client.get("/api/v1/insights", headers=headers).json(), B)["learners"] == 1
    lesson = client.get("/api/v1/insights", params={"exercise": A}, headers=headers).json()
    merged = lesson["lessons"][0]
    assert (merged["learners"], merged["read"], merged["quiz_passed"]) == (1, 1, 1)
    assert {k: v for k, v in merged["last_section"].items() if v} == {sections[2]: 1}
    kept = _summaries(engine)
    assert {owner for _, owner, *_ in kept[1]} == {account}
    with Session(engine) as session:
        insight_counts.rebuild(session)
        session.commit()
    assert _summaries(engine) == kept


def test_spreads_match_a_brute_force_count(client: TestClient, content) -> None:  # type: ignore[no-untyped-def]
    """A random class: the percentiles from the summaries (histograms, seconds looked up in
    their buckets) are those counted row by row, for the learners whose first submission falls
    in the filters."""
    import random
    from datetime import date

    from app.insights import service

    rng = random.Random(7)
    engine = client.app.state.engine  # type: ignore[attr-defined]
    subs, opened = [], []
    with Session(engine) as session:
        for n in range(60):
            owner, locale = f"learner:{n}", rng.choice(["en", "es"])
            at = T + rng.uniform(0, 4 * DAY)
            for _ in range(rng.randint(1, 6)):
                at += rng.choice([0.0, rng.uniform(0.0001, 5000)])
                status = rng.choice(["passed", "failed", "failed", "error"])
                subs.append((owner, at, status, locale))
                session.add(
                    Submission(
                        exercise=A,
                        code="x",
                        locale=locale,
                        owner=owner,
                        status=status,
                        created_at=at,
                    )
                )
            for hint in range(1, rng.randint(0, 3) + 1):
                opened.append((owner, T + rng.uniform(0, 4 * DAY)))
                session.add(HintOpen(owner=owner, exercise=A, hint=hint, opened_at=opened[-1][1]))
        session.flush()
        insight_counts.rebuild(session)
        session.commit()

        def brute(filters: service.Filters) -> dict[str, list[float]]:
            start, end = filters.bounds()
            values: dict[str, list[float]] = {"attempts": [], "hints": [], "seconds": []}
            for owner in {row[0] for row in subs}:
                mine = sorted(row for row in subs if row[0] == owner)
                first = mine[0]
                if filters.locale and first[3] != filters.locale:
                    continue
                if (start and first[1] < start) or (end and first[1] >= end):
                    continue
                passes = [row[1] for row in mine if row[2] == "passed"]
                if passes:
                    values["attempts"].append(sum(row[1] <= passes[0] for row in mine))
                    values["hints"].append(sum(o == owner and t <= passes[0] for o, t in opened))
                    values["seconds"].append(passes[0] - first[1])
            return values

        def rank(values: list[float], p: int) -> float | None:
            return sorted(values)[-(-p * len(values) // 100) - 1] if values else None

        day = datetime.fromtimestamp(T + DAY, UTC).date()
        for filters in (
            service.Filters(),
            service.Filters(exercise=A, locale="es"),
            service.Filters(since=day, until=date.fromordinal(day.toordinal() + 1)),
        ):
            item = _exercise(
                service.compute(session=session, content=content, filters=filters).model_dump(), A
            )
            expected = brute(filters)
            assert item["learners_passed"] == len(expected["seconds"]) > 3
            for field, name in (
                ("attempts_to_pass", "attempts"),
                ("hints_before_pass", "hints"),
                ("seconds_to_pass", "seconds"),
            ):
                for key, p in (("median", 50), ("p90", 90)):
                    assert item[field][key] == pytest.approx(rank(expected[name], p), abs=1e-3)


@both_databases
def test_migration_backfills_codes_and_goes_down(database_url: str | None, tmp_path: Path) -> None:
    url = database_url or f"sqlite:///{tmp_path / 'm.db'}"
    engine = create_engine(url)
    result = '{"status": "failed", "diagnosis": {"code": "never_stepped"}, "error": null}'
    with engine.connect() as connection:
        if database_url:
            connection.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            connection.commit()
        command.upgrade(migration_config(connection), "0004")
        connection.execute(
            text(
                "INSERT INTO submission (exercise, code, locale, id, owner, status, created_at, "
                "result_json) VALUES (:e, 'x', 'en', 'abc', 'learner:x', 'failed', 1.0, :r)"
            ),
            {"e": A, "r": result},
        )
        connection.commit()
    init_db(engine)
    with engine.connect() as connection:
        row = connection.execute(text("SELECT diagnosis_code, error_kind FROM submission")).one()
        assert tuple(row) == ("never_stepped", None)
        counted = connection.execute(
            text("SELECT metric, key, n FROM insight_count WHERE day = 0 ORDER BY metric")
        ).all()  # 1.0 s after 1970-01-01: day 0
        assert [tuple(r) for r in counted] == [
            ("diagnosis", "never_stepped", 1),
            ("graded", "", 1),
            ("learners", "", 1),
            ("submissions", "", 1),
        ]
        assert connection.execute(text("SELECT owner FROM insight_learner")).scalar() == "learner:x"
        command.downgrade(migration_config(connection), "0004")
        connection.commit()
        columns = connection.execute(text("SELECT * FROM submission")).keys()
        assert "diagnosis_code" not in columns
    engine.dispose()


def test_instructor_cli(tmp_path: Path) -> None:
    from app.main import create_app
    from gradlab.config import Settings

    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir, secret_key="test-secret")
    with TestClient(create_app(settings)) as client:
        token = register(client, "prof@example.org")

    def gradlab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gradlab.cli", "user", "instructor", *args],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GRADLAB_DATA_DIR": str(data_dir)},
        )

    granted = gradlab("Prof@example.org")
    assert granted.returncode == 0 and "prof@example.org: instructor" in granted.stdout
    assert gradlab("nobody@example.org").returncode == 1
    with TestClient(create_app(settings)) as client:
        assert client.get("/api/v1/insights", headers=bearer(token)).status_code == 200
    assert gradlab("prof@example.org", "--revoke").returncode == 0
    with TestClient(create_app(settings)) as client:
        assert client.get("/api/v1/insights", headers=bearer(token)).status_code == 403
