"""Discoverability: canonical links, hreflang alternates with x-default, sitemap.xml. A page
that falls back to English is never offered as a translation."""

import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from gradlab.config import LOCALES, Settings

PARTIAL = Path(__file__).parent / "fixtures" / "partial"
BASE = "https://gradlab.example"
NS = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9", "x": "http://www.w3.org/1999/xhtml"}


@pytest.fixture
def partial_client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        data_dir=tmp_path / "data",
        content_dir=Path(shutil.copytree(PARTIAL, tmp_path / "lessons")),
        secret_key="test",
        public_base_url=BASE,
    )
    with TestClient(create_app(settings)) as client:
        yield client


def _head_links(html: str) -> tuple[str, dict[str, str]]:
    canonical = re.findall(r'<link rel="canonical" href="([^"]+)">', html)
    alternates = dict(re.findall(r'<link rel="alternate" hreflang="([^"]+)" href="([^"]+)">', html))
    assert len(canonical) == 1, canonical
    return canonical[0], alternates


def test_partly_translated_page_points_to_english(partial_client: TestClient) -> None:
    # de falls back to English in places; tr is complete; es has no file at all
    canonical, alternates = _head_links(partial_client.get("/de/lessons/warmup").text)
    assert canonical == f"{BASE}/en/lessons/warmup"
    assert alternates == {
        "en": f"{BASE}/en/lessons/warmup",
        "tr": f"{BASE}/tr/lessons/warmup",
        "x-default": f"{BASE}/en/lessons/warmup",
    }
    canonical, same = _head_links(partial_client.get("/tr/lessons/warmup").text)
    assert canonical == f"{BASE}/tr/lessons/warmup" and same == alternates
    assert _head_links(partial_client.get("/es/lessons/warmup").text)[0] == canonical.replace(
        "/tr/", "/en/"
    )


def test_sitemap_lists_canonical_pages_with_their_alternates(partial_client: TestClient) -> None:
    response = partial_client.get("/sitemap.xml")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/xml")
    root = ET.fromstring(response.content)
    urls = {
        url.findtext("s:loc", namespaces=NS): {
            link.get("hreflang"): link.get("href") for link in url.findall("x:link", NS)
        }
        for url in root.findall("s:url", NS)
    }
    lesson_urls = {u for u in urls if "/lessons/" in u}
    assert lesson_urls == {f"{BASE}/en/lessons/warmup", f"{BASE}/tr/lessons/warmup"}
    assert urls[f"{BASE}/tr/lessons/warmup"]["x-default"] == f"{BASE}/en/lessons/warmup"
    # the fixture's course titles exist in en, de and tr only
    course_urls = {u for u in urls if "/lessons/" not in u}
    assert course_urls == {f"{BASE}/en/", f"{BASE}/de/", f"{BASE}/tr/"}
    assert urls[f"{BASE}/de/"]["x-default"] == f"{BASE}/"


def test_all_16_lesson_pages_are_served_fully_translated(client: TestClient) -> None:
    lessons = [item["id"] for item in client.get("/api/v1/lessons").json()["items"]]
    assert len(lessons) == 4
    for lesson in lessons:
        for locale in LOCALES:
            page = client.get(f"/{locale}/lessons/{lesson}")
            assert page.status_code == 200, (lesson, locale)
            assert f'<html lang="{locale}">' in page.text
            assert "data-untranslated" not in page.text, (lesson, locale)


def test_real_course_offers_every_page_in_every_language(client: TestClient) -> None:
    root = ET.fromstring(client.get("/sitemap.xml").content)
    locs = [url.findtext("s:loc", namespaces=NS) for url in root.findall("s:url", NS)]
    assert len(locs) == len(LOCALES) * (1 + 4)  # course page + 4 lessons, each in 4 languages
    for url in root.findall("s:url", NS):
        assert len(url.findall("x:link", NS)) == len(LOCALES) + 1
    page = client.get("/tr/lessons/profiling").text
    canonical, alternates = _head_links(page)
    assert canonical.endswith("/tr/lessons/profiling")
    assert set(alternates) == {*LOCALES, "x-default"}


def test_robots_points_at_the_sitemap(partial_client: TestClient) -> None:
    text = partial_client.get("/robots.txt").text
    assert f"Sitemap: {BASE}/sitemap.xml" in text and "Disallow: /api/" in text
