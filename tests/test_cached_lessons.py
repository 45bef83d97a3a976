"""Lesson pages answered before the router (app/cached_lessons.py): the same bytes and headers
as the route's, gzip assembled from pieces deflated once, and only where it is safe."""

import gzip
import re
import zlib

import httpx
import pytest
from fastapi.testclient import TestClient

from app.cached_lessons import deflated, stored
from gradlab.config import LOCALES

LESSON = "gradient-accumulation"
URL = f"/en/lessons/{LESSON}"
NONCE = re.compile(r"nonce-([A-Za-z0-9_-]+)")


def _get(client: TestClient, url: str, **headers: str) -> httpx.Response:
    return client.get(url, headers={"accept-encoding": "identity", **headers})


def _by_route(client: TestClient, url: str, **headers: str) -> httpx.Response:
    """The same page through FastAPI's route: any query string makes the fast path step aside
    (the route ignores a parameter it does not know)."""
    return _get(client, url + "?via=route", **headers)


def _normalised(response: httpx.Response) -> tuple[dict[str, str], str]:
    """Headers and body with this response's CSP nonce replaced (it is fresh per response)."""
    nonce = NONCE.search(response.headers.get("content-security-policy", ""))
    text = response.content.decode()
    headers = {k: v for k, v in response.headers.items() if k not in ("date", "server")}
    if nonce:
        text = text.replace(nonce.group(1), "NONCE")
        headers["content-security-policy"] = headers["content-security-policy"].replace(
            nonce.group(1), "NONCE"
        )
    return headers, text


@pytest.fixture
def returning(client: TestClient) -> TestClient:
    """A visitor with a learner cookie whose pages are already cached."""
    for locale in LOCALES:
        assert _get(client, f"/{locale}/lessons/{LESSON}").status_code == 200
    return client


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths that reach FastAPI's router."""
    from starlette.routing import Router

    seen: list[str] = []
    original = Router.__call__

    async def spy(self, scope, receive, send):  # type: ignore[no-untyped-def]
        seen.append(scope["path"])
        await original(self, scope, receive, send)

    monkeypatch.setattr(Router, "__call__", spy)
    return seen


@pytest.mark.parametrize("locale", LOCALES)
def test_a_returning_visitor_gets_the_routes_bytes_and_headers(
    returning: TestClient, routed: list[str], locale: str
) -> None:
    url = f"/{locale}/lessons/{LESSON}"
    fast = _get(returning, url)
    assert routed == [], "the request reached the router"
    slow = _by_route(returning, url)
    assert fast.status_code == slow.status_code == 200
    assert _normalised(fast) == _normalised(slow)
    assert NONCE.search(fast.headers["content-security-policy"]).group(1) in fast.text


def test_gzip_from_pieces_is_the_page_and_revalidation_is_304(
    returning: TestClient, routed: list[str]
) -> None:
    fast = _get(returning, URL, **{"accept-encoding": "gzip, br"})
    again = _get(returning, URL, **{"if-none-match": fast.headers["etag"]})
    assert routed == [], "a request reached the router"
    assert fast.headers["content-encoding"] == "gzip"
    assert fast.headers["vary"] == "Accept-Encoding"
    plain = _by_route(returning, URL)
    routes_gzip = _by_route(returning, URL, **{"accept-encoding": "gzip"})
    assert routes_gzip.headers["content-encoding"] == "gzip"
    # as small as the route's gzip of the whole page, give or take the per-response values
    assert int(fast.headers["content-length"]) <= 1.05 * int(routes_gzip.headers["content-length"])
    # httpx decoded it (zlib checks the trailer's CRC-32 and length)
    nonce = NONCE.search(fast.headers["content-security-policy"]).group(1)
    assert fast.text == plain.text.replace(
        NONCE.search(plain.headers["content-security-policy"]).group(1), nonce
    )
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == fast.headers["etag"]


def test_pieces_deflated_apart_make_one_valid_gzip_stream() -> None:
    """Each text deflated with the texts before it (holes as NULs) as its dictionary."""
    pieces = [b"<html><p>x</p>" * 500, b"token-123", b"<p>x</p></html>" * 300, b"", b"x" * 70000]
    body, history = [], b""
    for index, piece in enumerate(pieces):
        if index % 2:
            body.append(stored(piece))
            history += b"\0" * len(piece)
        else:
            body.append(deflated(piece, history=history))
            history += piece
    body = b"".join(body)
    crc = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
    total = sum(map(len, pieces))
    stream = (
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        + body
        + b"\x03\x00"
        + crc.to_bytes(4, "little")
        + total.to_bytes(4, "little")
    )
    assert gzip.decompress(stream) == b"".join(pieces)


def test_the_fast_path_steps_aside_where_the_route_must_answer(
    returning: TestClient, client: TestClient
) -> None:
    # a new visitor (no learner cookie): the route sets the cookie
    fresh = TestClient(client.app)
    first = _get(fresh, URL)
    assert first.status_code == 200 and "gradlab_learner" in first.headers["set-cookie"]
    # a forged learner cookie is not trusted: a new one is issued
    forged = TestClient(client.app, cookies={"gradlab_learner": "bm9wZQ.forged"})
    assert "gradlab_learner" in _get(forged, URL).headers["set-cookie"]
    # unknown lesson or locale: the route's 404 page
    assert _get(returning, "/en/lessons/no-such-lesson").status_code == 404
    assert _get(returning, f"/xx/lessons/{LESSON}").status_code == 404
    # HEAD is answered by the route (no body)
    head = returning.head(URL)
    assert head.status_code == 200 and head.content == b""


def test_a_signed_in_user_is_answered_by_the_route(
    returning: TestClient, routed: list[str]
) -> None:
    returning.cookies.set("gradlab_session", "anything")
    assert _get(returning, URL).status_code == 200
    assert routed == [URL]
