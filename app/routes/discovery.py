"""`/sitemap.xml` (with `hreflang` alternates per page) and `/robots.txt`."""

from xml.sax.saxutils import escape, quoteattr

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response

from app.deps import ContentDep, SettingsDep
from app.discovery import sitemap_pages
from gradlab.config import LOCALES

router = APIRouter(include_in_schema=False)


@router.get("/sitemap.xml")
def sitemap(content: ContentDep, settings: SettingsDep) -> Response:
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:xhtml="http://www.w3.org/1999/xhtml">',
    ]
    for page in sitemap_pages(content, base_url=settings.public_base_url):
        lines.append(f"  <url><loc>{escape(page.canonical)}</loc>")
        for hreflang, href in page.alternates.items():
            lines.append(
                f'    <xhtml:link rel="alternate" hreflang={quoteattr(hreflang)} '
                f"href={quoteattr(href)}/>"
            )
        lines.append("  </url>")
    lines.append("</urlset>")
    return Response("\n".join(lines) + "\n", media_type="application/xml")


@router.get("/robots.txt", response_class=PlainTextResponse)
def robots(settings: SettingsDep) -> str:
    base = settings.public_base_url.rstrip("/")
    private = "".join(f"Disallow: /{locale}/authoring/\n" for locale in LOCALES)
    return f"User-agent: *\nDisallow: /api/\n{private}Sitemap: {base}/sitemap.xml\n"
