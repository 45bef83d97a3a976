"""Jinja2 environment with the site's helpers (translations, markdown)."""

from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from app.i18n import LANGUAGE_NAMES, translate
from app.rendering import markdown, markdown_inline
from gradlab.config import LOCALES, PROJECT_ROOT

templates = Jinja2Templates(directory=PROJECT_ROOT / "templates")
templates.env.filters["md"] = markdown
templates.env.filters["md_inline"] = markdown_inline
templates.env.globals.update(LOCALES=LOCALES, LANGUAGE_NAMES=LANGUAGE_NAMES)


def render(
    request: Request, name: str, *, locale: str, status_code: int = 200, **context: Any
) -> HTMLResponse:
    def t(key: str, **values: object) -> str:
        return translate(locale, key, **values)

    return templates.TemplateResponse(
        request, name, {"locale": locale, "t": t, **context}, status_code=status_code
    )
