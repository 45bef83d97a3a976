"""REST API v1: submissions (validation, ownership, wait), with no worker running."""

from fastapi.testclient import TestClient

from gradlab.config import Settings
from tests.conftest import csrf_token
from tests.pg import both_databases

pytestmark = both_databases  # submissions are stored and read back on SQLite and PostgreSQL

EXERCISE = "gradient-accumulation/accumulate"


def test_submission_is_queued_and_readable_by_its_owner_only(
    client: TestClient, settings: Settings
) -> None:
    response = client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "pass"})
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "queued" and body["url"] == f"/api/v1/submissions/{body['id']}"
    assert body["result"] is None
    mine = client.get(body["url"])
    assert mine.status_code == 200 and mine.json()["id"] == body["id"]

    from app.main import create_app

    with TestClient(create_app(settings)) as stranger:
        assert stranger.get(body["url"]).status_code == 404
        assert stranger.get(f"/en/submissions/{body['id']}").status_code == 404


def test_forged_learner_cookie_is_a_new_learner(client: TestClient) -> None:
    body = client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": "x"}).json()
    client.cookies.set("gradlab_learner", "forged.value")
    assert client.get(body["url"]).status_code == 404


def test_bad_input_gets_clear_4xx(client: TestClient, settings: Settings) -> None:
    unknown = client.post("/api/v1/submissions", json={"exercise": "nope/nope", "code": "x"})
    assert unknown.status_code == 404 and "nope/nope" in unknown.json()["detail"]
    too_big = "#" * (settings.max_code_bytes + 1)
    assert (
        client.post("/api/v1/submissions", json={"exercise": EXERCISE, "code": too_big}).status_code
        == 413
    )
    malformed = client.post(
        "/api/v1/submissions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 422
    assert client.post("/api/v1/submissions", json={"code": "x"}).status_code == 422
    bad_locale = client.post(
        "/api/v1/submissions", json={"exercise": EXERCISE, "code": "x", "locale": "fr"}
    )
    assert bad_locale.status_code == 422
    assert client.get("/api/v1/submissions/does-not-exist").status_code == 404
    assert (
        client.post(
            "/api/v1/submissions?wait=-1", json={"exercise": EXERCISE, "code": "x"}
        ).status_code
        == 422
    )


def test_wait_returns_202_while_nobody_grades(client: TestClient) -> None:
    response = client.post("/api/v1/submissions?wait=0.3", json={"exercise": EXERCISE, "code": "x"})
    assert response.status_code == 202 and response.json()["status"] == "queued"


def test_form_submission_redirects_to_a_result_page_that_refreshes(client: TestClient) -> None:
    response = client.post(
        "/en/lessons/gradient-accumulation/exercises/accumulate",
        data={"code": "pass", "csrf_token": csrf_token(client)},
        follow_redirects=False,
    )
    assert response.status_code == 303
    page = client.get(response.headers["location"])
    assert page.status_code == 200 and page.headers["x-gradlab-status"] == "queued"
    assert 'http-equiv="refresh"' in page.text
    as_json = client.post(
        "/de/lessons/gradient-accumulation/exercises/accumulate",
        data={"code": "pass", "csrf_token": csrf_token(client)},
        headers={"accept": "application/json"},
    )
    assert as_json.status_code == 202
    assert as_json.json()["fragment_url"].startswith("/de/submissions/")
    unknown = client.post(
        "/en/lessons/gradient-accumulation/exercises/nope",
        data={"code": "x", "csrf_token": csrf_token(client)},
    )
    assert unknown.status_code == 404
