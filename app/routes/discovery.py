"""`/sitemap.xml` (with `hreflang` alternates per page), `/robots.txt` and `/favicon.ico`."""

from xml.sax.saxutils import escape, quoteattr

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response

from app.deps import ContentDep
from app.discovery import base_url, sitemap_pages
from app.static_files import static_url
from gradlab.config import LOCALES

router = APIRouter(include_in_schema=False)


@router.get("/favicon.ico")
def favicon() -> RedirectResponse:
    """Browsers ask for /favicon.ico whatever the page links: the site's icon is an SVG."""
    return RedirectResponse(
        static_url("favicon.svg"),
        status_code=301,
        headers={"Cache-Control": "public, max-age=86400"},
    )


@router.get("/sitemap.xml")
def sitemap(request: Request, content: ContentDep) -> Response:
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:xhtml="http://www.w3.org/1999/xhtml">',
    ]
    for page in sitemap_pages(content, base_url=base_url(request)):
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
def robots(request: Request) -> str:
    base = base_url(request)
    private = "".join(f"Disallow: /{locale}/authoring/\n" for locale in LOCALES)
    return f"User-agent: *\nDisallow: /api/\n{private}Sitemap: {base}/sitemap.xml\n"
