"""Moving through the course: every lesson page links the lessons before and after it, in the
page's language, for browsers (`rel="prev"`/`rel="next"` in the head) and for readers (a pager
at the end of the lesson)."""

import re

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from gradlab import queue
from gradlab.results import Check, GradeResult, ResultError

ORDER = ["mixed-precision", "gradient-accumulation", "profiling", "gpu-memory"]


def _head_link(html: str, rel: str) -> str | None:
    head = html.split("</head>", 1)[0]
    found = re.findall(rf'<link rel="{rel}" href="([^"]+)">', head)
    assert len(found) <= 1, found
    return found[0] if found else None


@pytest.mark.parametrize("locale", ["en", "de"])
def test_each_lesson_links_the_one_before_and_after(client: TestClient, locale: str) -> None:
    for index, lesson in enumerate(ORDER):
        html = client.get(f"/{locale}/lessons/{lesson}").text
        before = f"/{locale}/lessons/{ORDER[index - 1]}" if index else None
        after = f"/{locale}/lessons/{ORDER[index + 1]}" if index + 1 < len(ORDER) else None
        assert _head_link(html, "prev") == before
        assert _head_link(html, "next") == after
        pager = html.split('<nav class="lesson-pager"', 1)[1].split("</nav>", 1)[0]
        if after:
            assert f'rel="next" href="{after}"' in pager
        else:
            assert 'rel="next"' not in pager
    german = client.get("/de/lessons/gradient-accumulation").text
    assert "Nächste Lektion" in german and "Den Flaschenhals profilieren" in german


def test_a_result_page_is_titled_by_its_exercise_and_names_the_error_in_words(
    client: TestClient,
) -> None:
    sent = client.post(
        "/api/v1/submissions",
        json={"exercise": "gradient-accumulation/accumulate", "code": "loss = (\n"},
    ).json()["id"]
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        job = queue.claim(session=session, worker_id="test", lease_s=30, max_attempts=3)
        assert job is not None
        error = ResultError(kind="syntax_error", message="'(' was never closed", line=1)
        assert queue.finish(
            session=session,
            job_id=job.job_id,
            worker_id="test",
            result=GradeResult.failure(error, locale="de"),
        )
    page = client.get(f"/de/submissions/{sent}").text
    heading = re.search(r"<h1>(.*?)</h1>", page, re.S)
    assert heading and "Übung" in heading.group(1), heading
    assert "gradient-accumulation/accumulate" not in heading.group(1)
    assert "Gradientenakkumulation für große Batches" in page  # the lesson, in German
    assert "Syntaxfehler" in page and "<code>syntax_error</code>" not in page
    assert 'data-kind="syntax_error"' in page  # for scripts and styles, unchanged


def test_a_running_job_shows_how_long_the_code_may_still_run(client: TestClient) -> None:
    sent = client.post(
        "/api/v1/submissions", json={"exercise": "gradient-accumulation/accumulate", "code": "x"}
    ).json()["id"]
    queued = client.get(f"/de/submissions/{sent}?fragment=1").text
    assert "time-left" not in queued  # nothing runs yet
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        assert queue.claim(session=session, worker_id="test", lease_s=30, max_attempts=3)
    running = client.get(f"/de/submissions/{sent}?fragment=1").text
    line = re.search(
        r'<p class="note time-left" data-wall-s="(\d+)"\s+data-template="([^"]+)">', running
    )
    assert line, running
    assert line.group(1) == "10"  # lesson 2's wall clock (lessons/gradient-accumulation)
    assert "{s}" in line.group(2) and "Sekunden" in running  # German, counted down by the script


def test_a_lesson_with_a_passed_exercise_counts_as_read(client: TestClient) -> None:
    client.post(
        "/api/v1/submissions", json={"exercise": "gradient-accumulation/accumulate", "code": "x"}
    )
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        job = queue.claim(session=session, worker_id="test", lease_s=30, max_attempts=3)
        assert job is not None
        check = Check(id="runs", passed=True, points=1, max_points=1, message="")
        queue.finish(
            session=session, job_id=job.job_id, worker_id="test",
            result=GradeResult.from_checks([check]),
        )  # fmt: skip
    lessons = client.get("/api/v1/progress").json()["lessons"]
    assert lessons["gradient-accumulation"]["read"] is True  # the recap never scrolled by
    assert lessons["profiling"]["read"] is False
    page = client.get("/en/lessons/gradient-accumulation").text
    badges = re.findall(r'<p class="exercise-passed" data-exercise="([^"]+)" hidden>', page)
    assert "gradient-accumulation/accumulate" in badges  # shown by progress.js for this learner
