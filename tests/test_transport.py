"""What travels over the wire: fingerprinted static files cached for a year, compression, HEAD,
/favicon.ico, and the site's own address in canonical links when none is configured."""

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.datastructures import Headers

from app.main import create_app
from app.static_files import IMMUTABLE, StaticAssets
from gradlab.config import PROJECT_ROOT, Settings

LESSON = "/en/lessons/gradient-accumulation"
LINKED = re.compile(r'(?:href|src)="(/static/[^"]+)"')


def _linked_static(client: TestClient, page: str) -> list[str]:
    return LINKED.findall(client.get(page).text)


def test_pages_link_fingerprinted_files_that_are_cached_for_a_year(client: TestClient) -> None:
    urls = set(_linked_static(client, LESSON)) | set(_linked_static(client, "/en/"))
    names = {re.sub(r"\.[0-9a-f]{12}(\.\w+)$", r"\1", url) for url in urls}
    assert {"/static/css/site.css", "/static/js/exercise.js", "/static/favicon.svg"} <= names
    for url in urls:
        assert re.search(r"\.[0-9a-f]{12}\.\w+$", url), url
        response = client.get(url, headers={"Accept-Encoding": "identity"})
        assert response.status_code == 200, url
        assert response.headers["cache-control"] == IMMUTABLE
        plain = PROJECT_ROOT / "static" / url.removeprefix("/static/")
        plain = plain.with_name(re.sub(r"\.[0-9a-f]{12}(\.\w+)$", r"\1", plain.name))
        assert response.content == plain.read_bytes()  # the URL's bytes are the file's


def test_text_files_are_gzipped_once_with_an_etag_per_encoding(client: TestClient) -> None:
    url = next(u for u in _linked_static(client, LESSON) if "gradlab-editor" in u)
    plain = client.get(url, headers={"Accept-Encoding": "identity"})
    packed = client.get(url, headers={"Accept-Encoding": "gzip, deflate"})
    assert "content-encoding" not in plain.headers
    assert packed.headers["content-encoding"] == "gzip"
    assert packed.headers["vary"] == "Accept-Encoding"
    assert int(packed.headers["content-length"]) < len(plain.content) / 2  # the editor bundle
    assert packed.content == plain.content  # httpx decoded it: the same bytes
    assert packed.headers["etag"] != plain.headers["etag"]
    again = client.get(
        url, headers={"Accept-Encoding": "gzip", "If-None-Match": packed.headers["etag"]}
    )
    assert again.status_code == 304 and again.content == b""
    refused = client.get(url, headers={"Accept-Encoding": "gzip;q=0"})
    assert "content-encoding" not in refused.headers


def test_plain_and_outdated_urls_get_the_current_bytes_revalidated(tmp_path: Path) -> None:
    (tmp_path / "css").mkdir()
    sheet = tmp_path / "css" / "site.css"
    sheet.write_text("body { color: red }\n" * 100)
    assets = StaticAssets(tmp_path, prefix="/static")
    first = assets.url("css/site.css")
    sheet.write_text("body { color: blue }\n" * 100)  # an edit under a running server
    second = assets.url("css/site.css")
    assert first != second and first.startswith("/static/css/site.") and first.endswith(".css")
    no_gzip = Headers({"accept-encoding": "identity"})
    old = assets.respond("GET", first.removeprefix("/static/"), no_gzip)
    assert old.headers["cache-control"] == "no-cache" and b"blue" in old.body  # never stale
    new = assets.respond("GET", second.removeprefix("/static/"), no_gzip)
    assert new.headers["cache-control"] == IMMUTABLE and new.body == sheet.read_bytes()
    plain = assets.respond("GET", "css/site.css", no_gzip)
    assert plain.headers["cache-control"] == "no-cache"
    with pytest.raises(KeyError):
        assets.url("css/missing.css")  # a template's typo fails its render


@pytest.mark.parametrize(
    "path",
    [
        "/static/../gradlab/config.py",
        "/static/%2e%2e/gradlab/config.py",
        "/static/css/../../pyproject.toml",
        "/static/.hidden",
        "/static/css/site.0123456789ab.css.map",
    ],
)
def test_only_files_under_static_are_served(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 404


def test_html_and_json_are_compressed(client: TestClient) -> None:
    page = client.get(LESSON, headers={"Accept-Encoding": "gzip"})
    assert page.status_code == 200 and page.headers["content-encoding"] == "gzip"
    assert "<html" in page.text
    listing = client.get("/api/v1/lessons", headers={"Accept-Encoding": "gzip"})
    assert listing.status_code == 200 and len(listing.content) >= 1024
    assert listing.headers["content-encoding"] == "gzip"
    raw = client.get(LESSON, headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in raw.headers


@pytest.mark.parametrize("path", [LESSON, "/en/", "/en/login", "/healthz", "/sitemap.xml"])
def test_head_answers_what_get_would_without_a_body(client: TestClient, path: str) -> None:
    get = client.get(path, headers={"Accept-Encoding": "identity"})
    head = client.head(path, headers={"Accept-Encoding": "identity"})
    assert head.status_code == get.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    if path == "/healthz":  # its body carries the database's answer time: a digit more or less
        assert abs(int(head.headers["content-length"]) - len(get.content)) <= 3
    else:
        assert int(head.headers["content-length"]) == len(get.content)


def test_favicon_ico_leads_to_the_sites_icon(client: TestClient) -> None:
    response = client.get("/favicon.ico", follow_redirects=False)
    assert response.status_code == 301
    icon = client.get(response.headers["location"])
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.headers["cache-control"] == IMMUTABLE


def _canonical(html: str) -> str:
    found = re.search(r'<link rel="canonical" href="([^"]+)">', html)
    assert found, "no canonical link"
    return found.group(1)


def test_without_a_configured_address_links_name_the_host_that_was_asked(
    client: TestClient,
) -> None:
    for host in ("learn.example.org", "127.0.0.1:8123"):
        page = client.get(LESSON, headers={"Host": host})
        assert _canonical(page.text) == f"http://{host}{LESSON}"
        assert f"http://{host}/en/" in client.get("/en/", headers={"Host": host}).text
        assert (
            f"<loc>http://{host}/en/</loc>"
            in client.get("/sitemap.xml", headers={"Host": host}).text
        )
        robots = client.get("/robots.txt", headers={"Host": host}).text
        assert f"Sitemap: http://{host}/sitemap.xml" in robots
    # a made-up Host header fills a slot; it never adds a page to the cache
    assert client.app.state.page_cache.renders == 1  # type: ignore[attr-defined]
    hostile = client.get(LESSON, headers={"Host": 'evil"><script>x</script>'})
    assert "<script>x</script>" not in hostile.text


def test_a_configured_address_is_used_and_trusted(settings: Settings, caplog) -> None:  # type: ignore[no-untyped-def]
    settings.public_base_url = "https://learn.example.org"
    with TestClient(create_app(settings)) as client:
        assert _canonical(client.get(LESSON).text) == f"https://learn.example.org{LESSON}"
        # the configured origin may post to the API with the learner's cookie
        sent = client.post(
            "/api/v1/submissions",
            json={"exercise": "gradient-accumulation/accumulate", "code": "x"},
            headers={"Origin": "https://learn.example.org"},
        )
        assert sent.status_code == 202
    assert "GRADLAB_PUBLIC_BASE_URL is not set" not in caplog.text
    settings.public_base_url = None
    create_app(settings)
    assert "GRADLAB_PUBLIC_BASE_URL is not set" in caplog.text  # said once, at start
