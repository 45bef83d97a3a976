"""GET /docs: the API's Swagger UI, served from the site's own files.

FastAPI's default page loads Swagger UI from a CDN and starts it with an inline script; the
site's Content-Security-Policy (app/security_headers.py: 'self' only, nothing inline) blocks
both, so the page stayed blank. Here the files come from the `fastapi-offline` package, which
ships current Swagger UI builds (OpenAPI 3.1, as FastAPI writes it), mounted at /docs/assets by
app.main, and the start-up code from static/js/api-docs.js: the site's one policy holds here
too, unchanged.
"""

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from app.static_files import StaticAssets, static_url

SWAGGER_UI_DIR = Path(fastapi_offline.__file__).parent / "static"
ASSETS = "/docs/assets"
SWAGGER_UI = StaticAssets(SWAGGER_UI_DIR, prefix=ASSETS)  # mounted at ASSETS by app.main
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gradlab API</title>
<link rel="stylesheet" href="{css}">
<link rel="icon" href="{icon}" type="image/svg+xml">
</head>
<body>
<div id="swagger-ui" data-openapi-url="/openapi.json"></div>
<script src="{bundle}"></script>
<script src="{start}"></script>
</body>
</html>
"""

router = APIRouter(include_in_schema=False)


@router.get("/docs", response_class=HTMLResponse)
def api_docs() -> HTMLResponse:
    page = PAGE.format(
        css=SWAGGER_UI.url("swagger-ui.css"),
        bundle=SWAGGER_UI.url("swagger-ui-bundle.js"),
        icon=static_url("favicon.svg"),
        start=static_url("js/api-docs.js"),
    )
    return HTMLResponse(page, headers={"Cache-Control": "no-cache"})
