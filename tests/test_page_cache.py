"""Lesson pages rendered once per (lesson, locale, content version) and served with each
request's own parts (app/page_cache.py); ETag / 304 on lesson and course pages; static files."""

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from fastapi.testclient import TestClient

import app.page_cache as page_cache
from app.main import create_app
from gradlab.config import PROJECT_ROOT, Settings
from tests.conftest import CSRF_META, csrf_token

LESSON = "gradient-accumulation"
URL = f"/en/lessons/{LESSON}"
ARTICLE = re.compile(r'<article class="lesson">.*</article>', re.S)
HIDDEN = re.compile(r'<input type="hidden" name="csrf_token" value="([^"]*)">')
NONCE_ATTR = re.compile(r'nonce="([^"]+)"')
PASSWORD = "correct horse battery staple"


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every render of a lesson's shared part, as (lesson, locale)."""
    calls: list[tuple[str, str]] = []
    real = page_cache.render_lesson

    def counting(content, *, lesson: str, locale: str):  # type: ignore[no-untyped-def]
        calls.append((lesson, locale))
        return real(content, lesson=lesson, locale=locale)

    monkeypatch.setattr(page_cache, "render_lesson", counting)
    return calls


@pytest.fixture
def other(client: TestClient) -> Iterator[TestClient]:
    """A second browser (its own cookie jar) on the same app."""
    yield TestClient(client.app)


def _article(html: str) -> str:
    found = ARTICLE.search(html)
    assert found, "no lesson article"
    # the article's forms carry the learner's token: compare everything else
    return HIDDEN.sub('<input type="hidden" name="csrf_token" value="">', found.group(0))


def _nonce(response) -> str:  # type: ignore[no-untyped-def]
    found = re.search(r"'nonce-([^']+)'", response.headers["content-security-policy"])
    assert found
    return found.group(1)


def _quiz_answer() -> int:
    spec = yaml.safe_load((PROJECT_ROOT / "lessons" / LESSON / "lesson.yaml").read_text("utf-8"))
    return next(s for s in spec["sections"] if s["kind"] == "quiz")["quiz"]["answer"]


def test_rendered_once_per_lesson_and_locale_with_each_learners_own_parts(
    client: TestClient, other: TestClient, renders: list[tuple[str, str]]
) -> None:
    first, second = client.get(URL), other.get(URL)
    again = client.get(URL)
    outcomes = [client.get(f"{URL}?quiz={q}") for q in ("correct", "wrong", "bogus")]
    assert renders == [(LESSON, "en")]
    for response in (first, second, again, *outcomes):
        assert response.status_code == 200
        assert "gradlab-slot-" not in response.text  # no marker leaks out of the cache

    # one article for everybody, per-user parts per learner
    assert _article(first.text) == _article(second.text) == _article(again.text)
    tokens = [CSRF_META.search(r.text).group(1) for r in (first, second)]  # type: ignore[union-attr]
    assert tokens[0] != tokens[1] and all(tokens)
    for response, token in zip((first, second), tokens, strict=True):
        fields = HIDDEN.findall(response.text)
        assert len(fields) >= 2 and set(fields) == {token}  # quiz form + every exercise form
    nonces = [_nonce(r) for r in (first, second, again)]
    assert len(set(nonces)) == 3  # fresh per response, cache or not
    for response, nonce in zip((first, second, again), nonces, strict=True):
        assert NONCE_ATTR.findall(response.text) == [nonce]

    # the quiz outcome is a slot: the same cached page with a different outcome
    correct, wrong, bogus = (r.text for r in outcomes)
    assert 'class="quiz-outcome correct"' in correct and "quiz-outcome" not in bogus
    assert 'class="quiz-outcome wrong"' in wrong and "quiz-outcome" not in first.text

    client.get(f"/de/lessons/{LESSON}")
    client.get(f"/de/lessons/{LESSON}")
    client.get("/en/lessons/mixed-precision")
    assert renders == [(LESSON, "en"), (LESSON, "de"), ("mixed-precision", "en")]
    assert client.app.state.page_cache.renders == 3  # type: ignore[attr-defined]


def test_the_cached_page_is_the_page_the_template_renders(client: TestClient) -> None:
    """The cached path gives exactly what rendering lesson.html per request would."""
    from app.discovery import lesson_links
    from app.rendering import reading_minutes
    from app.templating import render
    from gradlab.content.loader import lesson_view

    response = client.get(f"{URL}?quiz=correct")
    nonce = _nonce(response)
    content = client.app.state.content_store.get()  # type: ignore[attr-defined]
    view = lesson_view(content, LESSON, "en")

    request = SimpleNamespace(  # what the templates read of a request
        app=client.app,
        state=SimpleNamespace(csp_nonce=nonce, learner_id=None),
        headers={},
        cookies={},
    )
    token = CSRF_META.search(response.text).group(1)  # type: ignore[union-attr]
    request.app.state.csrf.for_learner = lambda _id: token  # type: ignore[attr-defined]
    try:
        direct = render(
            request,  # type: ignore[arg-type]
            "lesson.html",
            locale="en",
            view=view,
            minutes=reading_minutes(view),
            course_lessons=content.lesson_list("en"),
            quiz_outcome="correct",
            path=lambda loc: f"/{loc}/lessons/{LESSON}",
            links=lesson_links(content, lesson=LESSON, locale="en", base_url="http://testserver"),
        )
    finally:
        del request.app.state.csrf.for_learner  # type: ignore[attr-defined]
    assert response.text == bytes(direct.body).decode()


def test_if_none_match_gives_304_without_a_body(client: TestClient) -> None:
    page = client.get(URL)
    etag = page.headers["etag"]
    assert re.fullmatch(r'W/"[0-9a-f]{32}"', etag)
    assert page.headers["cache-control"] == "private, no-cache"

    for header in (etag, etag.removeprefix("W/"), f'"nope", {etag}', "*"):
        cached = client.get(URL, headers={"If-None-Match": header})
        assert cached.status_code == 304, header
        assert cached.content == b""
        assert cached.headers["etag"] == etag
        assert cached.headers["cache-control"] == "private, no-cache"
        # the browser keeps the stored page and its stored CSP, whose nonce is in that page
        assert "content-security-policy" not in cached.headers
        assert "content-type" not in cached.headers
    assert client.get(URL, headers={"If-None-Match": '"other"'}).status_code == 200


def test_the_etag_changes_with_learner_locale_and_quiz_outcome(
    client: TestClient, other: TestClient
) -> None:
    etags = {
        "en": client.get(URL).headers["etag"],
        "en again": client.get(URL).headers["etag"],
        "other learner": other.get(URL).headers["etag"],
        "de": client.get(f"/de/lessons/{LESSON}").headers["etag"],
        "correct": client.get(f"{URL}?quiz=correct").headers["etag"],
        "wrong": client.get(f"{URL}?quiz=wrong").headers["etag"],
        "other lesson": client.get("/en/lessons/mixed-precision").headers["etag"],
    }
    assert etags.pop("en again") == etags["en"]
    assert len(set(etags.values())) == len(etags)
    # another learner's ETag never validates this learner's page
    mine = client.get(URL, headers={"If-None-Match": etags["other learner"]})
    assert mine.status_code == 200


def test_signed_in_and_anonymous_pages_differ_only_where_they_should(
    client: TestClient, renders: list[tuple[str, str]]
) -> None:
    anonymous = client.get(URL)
    assert 'href="/en/login"' in anonymous.text and "logout-form" not in anonymous.text
    response = client.post(
        "/api/v1/auth/register", json={"email": "ada@example.org", "password": PASSWORD}
    )
    assert response.status_code == 201, response.text
    signed_in = client.get(URL)
    assert "Signed in as ada@example.org" in signed_in.text
    assert 'action="/en/logout"' in signed_in.text and 'href="/en/login"' not in signed_in.text
    token = CSRF_META.search(signed_in.text).group(1)  # type: ignore[union-attr]
    assert set(HIDDEN.findall(signed_in.text)) == {token}  # the logout form's too
    assert _article(signed_in.text) == _article(anonymous.text)
    assert renders == [(LESSON, "en")]
    # same learner cookie, now signed in: the stored anonymous page is not valid any more
    assert signed_in.headers["etag"] != anonymous.headers["etag"]
    stale = client.get(URL, headers={"If-None-Match": anonymous.headers["etag"]})
    assert stale.status_code == 200 and "Signed in as" in stale.text

    logout = client.post("/en/logout", data={"csrf_token": token}, follow_redirects=False)
    assert logout.status_code == 303
    again = client.get(URL)
    assert again.headers["etag"] == anonymous.headers["etag"]
    assert "Signed in as" not in again.text


def test_the_forms_of_a_cached_page_work_without_javascript(client: TestClient) -> None:
    page = client.get(URL)
    token = HIDDEN.search(page.text).group(1)  # type: ignore[union-attr]
    response = client.post(
        f"{URL}/quiz",
        data={"answer": str(_quiz_answer()), "csrf_token": token},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == f"{URL}?quiz=correct#quick-check"


def test_the_same_page_gets_the_same_etag_in_another_server_process(
    settings: Settings, client: TestClient
) -> None:
    """Several processes (uvicorn --workers) render the same content alike: a browser's ETag
    from one of them is valid in another."""
    first = client.get(URL)
    second_app = create_app(settings)
    with TestClient(second_app, cookies=dict(client.cookies)) as elsewhere:
        response = elsewhere.get(URL, headers={"If-None-Match": first.headers["etag"]})
    assert response.status_code == 304


def _touch_later(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_a_content_edit_changes_the_page_and_its_etag(
    tmp_path: Path, renders: list[tuple[str, str]]
) -> None:
    tree = Path(shutil.copytree(PROJECT_ROOT / "lessons", tmp_path / "lessons"))
    settings = Settings(
        data_dir=tmp_path / "data", content_dir=tree, secret_key="t", content_reload_s=0.01
    )
    with TestClient(create_app(settings)) as client:
        before = client.get(URL)
        assert "The big-batch problem" in before.text
        assert client.get(URL).headers["etag"] == before.headers["etag"]
        assert renders == [(LESSON, "en")]

        en = tree / LESSON / "en.yaml"
        text = en.read_text(encoding="utf-8")
        en.write_text(text.replace("The big-batch problem", "The huge-batch problem"), "utf-8")
        _touch_later(en)
        time.sleep(0.05)
        after = client.get(URL, headers={"If-None-Match": before.headers["etag"]})
        assert after.status_code == 200  # the stored page is stale
        assert "The huge-batch problem" in after.text
        assert "The big-batch problem" not in after.text
        assert after.headers["etag"] != before.headers["etag"]
        assert renders == [(LESSON, "en"), (LESSON, "en")]
        assert client.get(URL, headers={"If-None-Match": after.headers["etag"]}).status_code == 304


def test_course_page_etag_follows_progress(client: TestClient) -> None:
    page = client.get("/en/")
    etag = page.headers["etag"]
    assert page.headers["cache-control"] == "private, no-cache"
    cached = client.get("/en/", headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.content == b""
    assert "content-security-policy" not in cached.headers

    response = client.post(
        f"{URL}/quiz",
        data={"answer": str(_quiz_answer()), "csrf_token": csrf_token(client)},
        follow_redirects=False,
    )
    assert response.status_code == 303
    changed = client.get("/en/", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag


@pytest.mark.parametrize(
    "path", ["/static/css/site.css", "/static/js/exercise.js", "/static/js/progress.js"]
)
def test_static_files_are_revalidated_with_etags(client: TestClient, path: str) -> None:
    first = client.get(path)
    assert first.status_code == 200 and first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache"  # kept, revalidated: deploys show at once
    cached = client.get(path, headers={"If-None-Match": first.headers["etag"]})
    assert cached.status_code == 304 and cached.content == b""
