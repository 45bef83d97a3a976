"""Progress sync (exactly the shape of docs/contracts.md), the quick check and submissions
marking it, the course page's view of it, drafts, and that nobody sees another learner's data."""

import re
from collections.abc import Iterator

import pytest
import yaml
from fastapi.testclient import TestClient

from app.i18n import gettext, ngettext
from gradlab.config import PROJECT_ROOT
from tests.conftest import csrf_token
from tests.test_accounts import PASSWORD, bearer, grade_all, register
from tests.test_pages import parse

LESSONS = PROJECT_ROOT / "lessons"
COURSE = yaml.safe_load((LESSONS / "course.yaml").read_text(encoding="utf-8"))
ORDER = [entry["id"] for entry in COURSE["lessons"]]
LESSON = "gradient-accumulation"
SPEC = yaml.safe_load((LESSONS / LESSON / "lesson.yaml").read_text(encoding="utf-8"))
QUIZ = next(s for s in SPEC["sections"] if s["kind"] == "quiz")
EXERCISES = [f"{LESSON}/{e['id']}" for e in SPEC["exercises"]]
EXERCISE = EXERCISES[0]


@pytest.fixture
def other(client: TestClient) -> Iterator[TestClient]:
    with TestClient(client.app) as second:
        yield second


def exercises_of(lesson: str) -> list[str]:
    spec = yaml.safe_load((LESSONS / lesson / "lesson.yaml").read_text(encoding="utf-8"))
    return [f"{lesson}/{e['id']}" for e in spec.get("exercises", [])]


def test_progress_shape_is_exactly_the_contract(client: TestClient) -> None:
    response = client.get("/api/v1/progress")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"last_lesson", "lessons"}
    assert body["last_lesson"] is None
    assert list(body["lessons"]) == ORDER  # every lesson of the course, in order
    for lesson, state in body["lessons"].items():
        assert set(state) == {"read", "quiz_passed", "last_section", "exercises"}
        assert state["read"] is False and state["quiz_passed"] is False
        assert state["last_section"] is None
        assert state["exercises"] == dict.fromkeys(exercises_of(lesson), "not_started")
    assert list(body["lessons"][LESSON]["exercises"]) == EXERCISES


def test_put_progress_records_read_and_section(client: TestClient) -> None:
    url = f"/api/v1/progress/{LESSON}"
    first = client.put(url, json={"last_section": SPEC["sections"][2]["id"]})
    assert first.status_code == 200
    assert first.json() == {
        "read": False,
        "quiz_passed": False,
        "last_section": SPEC["sections"][2]["id"],
        "exercises": dict.fromkeys(EXERCISES, "not_started"),
    }
    assert client.put(url, json={"read": True}).json()["last_section"] == SPEC["sections"][2]["id"]
    assert client.put(url, json={"last_section": "exercise-accumulate"}).status_code == 200
    body = client.get("/api/v1/progress").json()
    assert body["last_lesson"] == LESSON
    assert body["lessons"][LESSON]["read"] is True
    assert body["lessons"][LESSON]["last_section"] == "exercise-accumulate"
    client.put("/api/v1/progress/profiling", json={"read": True})
    assert client.get("/api/v1/progress").json()["last_lesson"] == "profiling"


def test_put_progress_bad_input(client: TestClient) -> None:
    assert client.put("/api/v1/progress/no-such-lesson", json={"read": True}).status_code == 404
    unknown = client.put(f"/api/v1/progress/{LESSON}", json={"last_section": "nope"})
    assert unknown.status_code == 422 and "nope" in unknown.json()["detail"]
    assert client.put(f"/api/v1/progress/{LESSON}", json={"read": "maybe"}).status_code == 422
    assert client.put(f"/api/v1/progress/{LESSON}", json={"score": 1}).status_code == 422
    assert client.get("/api/v1/progress").json()["last_lesson"] is None


def test_quiz_via_api_is_recorded_only_when_correct(client: TestClient) -> None:
    url = f"/api/v1/lessons/{LESSON}/quiz"
    wrong = (QUIZ["quiz"]["answer"] + 1) % QUIZ["quiz"]["options"]
    assert client.post(url, json={"answer": wrong}).json()["correct"] is False
    assert client.get("/api/v1/progress").json()["lessons"][LESSON]["quiz_passed"] is False
    assert client.post(url, json={"answer": QUIZ["quiz"]["answer"]}).json()["correct"] is True
    assert client.get("/api/v1/progress").json()["lessons"][LESSON]["quiz_passed"] is True
    client.post(url, json={"answer": wrong})  # a later wrong answer does not take it back
    assert client.get("/api/v1/progress").json()["lessons"][LESSON]["quiz_passed"] is True


def test_quiz_form_is_recorded(client: TestClient) -> None:
    response = client.post(
        f"/de/lessons/{LESSON}/quiz",
        data={"answer": str(QUIZ["quiz"]["answer"]), "csrf_token": csrf_token(client)},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert client.get("/api/v1/progress").json()["lessons"][LESSON]["quiz_passed"] is True


def test_submission_marks_attempted_then_passed(client: TestClient) -> None:
    def state() -> str:
        return client.get("/api/v1/progress").json()["lessons"][LESSON]["exercises"][EXERCISE]

    client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"})
    assert state() == "attempted"  # on creation, before any grading
    grade_all(client, "failed")
    assert state() == "attempted"
    client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "y"})
    grade_all(client, "passed")
    assert state() == "passed"
    client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "z"})
    grade_all(client, "failed")
    assert state() == "passed"  # passed once is passed
    body = client.get("/api/v1/progress").json()
    assert body["last_lesson"] == LESSON
    others = {ref: s for ref, s in body["lessons"][LESSON]["exercises"].items() if ref != EXERCISE}
    assert set(others.values()) == {"not_started"}


def test_course_page_shows_progress_and_continue_link(client: TestClient) -> None:
    _, before = None, parse(client.get("/en/").text)
    assert not before.find_all("p", cls="continue")
    client.put(f"/api/v1/progress/{LESSON}", json={"last_section": "scale-the-loss", "read": True})
    client.post(f"/api/v1/lessons/{LESSON}/quiz", json={"answer": QUIZ["quiz"]["answer"]})
    client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "y"})
    grade_all(client, "passed")

    for locale in ("en", "tr"):
        doc = parse(client.get(f"/{locale}/").text)
        link = doc.find("p", cls="continue").find("a")
        assert link.attrs["href"] == f"/{locale}/lessons/{LESSON}#scale-the-loss"
        assert link.text == gettext(locale, "Continue where you left off")
        state = doc.find("p", cls="lesson-state", data_lesson=LESSON)
        texts = [small.words for small in state.find_all("small")]
        assert texts == [
            gettext(locale, "Read"),
            gettext(locale, "Quick check passed"),
            ngettext(
                locale,
                "%(passed)s of %(count)s exercise passed",
                "%(passed)s of %(count)s exercises passed",
                3,
                passed=1,
                count=3,
            ),
        ]
        other_state = doc.find("p", cls="lesson-state", data_lesson="profiling")
        assert gettext(locale, "Not read yet") in other_state.words
    lesson_page = client.get(f"/en/lessons/{LESSON}").text
    assert re.search(
        r'<script src="/static/js/progress\.[0-9a-f]{12}\.js" defer></script>', lesson_page
    )


def test_progress_script_is_served(client: TestClient) -> None:
    script = client.get("/static/js/progress.js")
    assert script.status_code == 200
    assert "/api/v1/progress/" in script.text and "X-CSRF-Token" in script.text


# --- drafts -----------------------------------------------------------------------------------


def test_drafts_round_trip(client: TestClient) -> None:
    url = f"/api/v1/drafts/{EXERCISE}"
    assert client.get(url).json() == {"code": None, "updated_at": None}
    saved = client.put(url, json={"code": "for x, y in loader:\n    pass\n"})
    assert saved.status_code == 200
    assert saved.json()["code"] == "for x, y in loader:\n    pass\n"
    assert isinstance(saved.json()["updated_at"], float)
    again = client.put(url, json={"code": "v2"}).json()
    assert client.get(url).json() == again and again["updated_at"] >= saved.json()["updated_at"]
    assert client.delete(url).status_code == 204
    assert client.get(url).json() == {"code": None, "updated_at": None}


def test_drafts_bad_input(client: TestClient) -> None:
    limit = client.app.state.settings.max_code_bytes  # type: ignore[attr-defined]
    url = f"/api/v1/drafts/{EXERCISE}"
    assert client.put(url, json={"code": "#" * (limit + 1)}).status_code == 413
    assert client.put(url, json={"code": "#" * limit}).status_code == 200
    assert client.get(f"/api/v1/drafts/{LESSON}/nope").status_code == 404
    assert client.put(f"/api/v1/drafts/{LESSON}/nope", json={"code": "x"}).status_code == 404
    assert client.put("/api/v1/drafts/nope/accumulate", json={"code": "x"}).status_code == 404
    assert client.put(url, json={"text": "x"}).status_code == 422


# --- isolation between learners -----------------------------------------------------------------


def test_user_b_cannot_see_user_a(client: TestClient, other: TestClient) -> None:
    token_a = register(client, "a@example.org")
    token_b = register(other, "b@example.org")
    submitted = client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"})
    url = submitted.json()["url"]
    client.put(f"/api/v1/progress/{LESSON}", json={"read": True, "last_section": "recap"})
    client.put(f"/api/v1/drafts/{EXERCISE}", json={"code": "A's secret draft"})

    # B, by cookie and by bearer token
    for headers in ({}, bearer(token_b)):
        assert other.get(url, headers=headers).status_code == 404
        assert other.get(f"/en/submissions/{submitted.json()['id']}").status_code == 404
        progress = other.get("/api/v1/progress", headers=headers).json()
        assert progress["last_lesson"] is None
        assert progress["lessons"][LESSON]["read"] is False
        assert progress["lessons"][LESSON]["exercises"][EXERCISE] == "not_started"
        assert other.get(f"/api/v1/drafts/{EXERCISE}", headers=headers).json()["code"] is None
    # B writing to the same lesson and exercise changes nothing of A's
    other.put(f"/api/v1/drafts/{EXERCISE}", json={"code": "B's draft"})
    other.put(f"/api/v1/progress/{LESSON}", json={"read": False, "last_section": "core-trick"})
    a_view = client.get("/api/v1/progress", headers=bearer(token_a)).json()["lessons"][LESSON]
    assert a_view["read"] is True and a_view["last_section"] == "recap"
    assert client.get(f"/api/v1/drafts/{EXERCISE}").json()["code"] == "A's secret draft"
    # an anonymous stranger neither
    with TestClient(client.app) as stranger:
        assert stranger.get(url).status_code == 404
        assert stranger.get("/api/v1/progress").json()["last_lesson"] is None


def test_logging_out_leaves_the_account_data_behind(client: TestClient) -> None:
    register(client)
    client.put(f"/api/v1/progress/{LESSON}", json={"read": True})
    client.post("/api/v1/auth/logout")
    assert client.get("/api/v1/progress").json()["lessons"][LESSON]["read"] is False
    client.post("/api/v1/auth/login", json={"email": "ada@example.org", "password": PASSWORD})
    assert client.get("/api/v1/progress").json()["lessons"][LESSON]["read"] is True


# --- progress.js in a real browser ---------------------------------------------------------------


@pytest.mark.slow
def test_progress_script_reports_section_and_read(browser, server: str) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "response",
        lambda r: (
            errors.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None
        ),
    )
    page.goto(f"{server}/es/lessons/{LESSON}")

    def is_progress_put(response) -> bool:  # type: ignore[no-untyped-def]
        return response.request.method == "PUT" and "/api/v1/progress/" in response.url

    with page.expect_response(is_progress_put, timeout=10_000) as read_put:
        page.locator("#recap").scroll_into_view_if_needed()
    assert read_put.value.status == 200
    with page.expect_response(is_progress_put, timeout=10_000) as section_put:
        page.locator("#scale-the-loss").scroll_into_view_if_needed()
        page.mouse.wheel(0, 1)
    assert section_put.value.status == 200
    page.wait_for_timeout(300)
    state = page.request.get(f"{server}/api/v1/progress").json()["lessons"][LESSON]
    assert state["read"] is True
    assert state["last_section"] in [s["id"] for s in SPEC["sections"]]
    course = page.request.get(f"{server}/es/").text()
    assert f'href="/es/lessons/{LESSON}#{state["last_section"]}"' in course
    assert errors == []
    context.close()
