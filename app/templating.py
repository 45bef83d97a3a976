"""Jinja2 environment with the site's helpers (gettext via jinja2.ext.i18n, numbers, markdown).

One environment serves every locale. The gettext callables are installed on it once, at import,
and each of them reads the catalog from the *render context* (`translations`, put there by
`render`), never from shared state: two requests in different languages can render at the same
time in different threads without seeing each other's catalog. Newstyle gettext: `_()` output is
autoescaped and formatted with `%(name)s` placeholders, and `{% trans %}` blocks are trimmed.
"""

from dataclasses import dataclass
from typing import Any

from babel.support import NullTranslations
from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, pass_context
from jinja2.runtime import Context

from app.accounts.auth import install_template_globals as install_account_globals
from app.charts import weights_chart
from app.i18n import LANGUAGE_NAMES, format_number, format_share, translations
from app.page_slots import install_template_globals as install_page_slot_globals
from app.rendering import highlight_block, markdown, markdown_inline
from app.security.csrf import install_template_globals as install_csrf_globals
from app.static_files import static_url
from gradlab.config import LOCALES, PROJECT_ROOT

env = Environment(
    loader=FileSystemLoader(PROJECT_ROOT / "templates"),
    autoescape=True,
    extensions=["jinja2.ext.i18n"],
)
env.policies["ext.i18n.trimmed"] = True  # babel.cfg extracts with trimmed = true as well


def _catalog(context: Context) -> NullTranslations:
    catalog = context.get("translations")
    if catalog is None:
        raise RuntimeError(
            f"template {context.name!r} was rendered without `translations` in its context: "
            "render pages through app.templating.render (and import macros `with context`)"
        )
    return catalog


@pass_context
def _gettext(context: Context, message: str) -> str:
    return _catalog(context).gettext(message)


@pass_context
def _ngettext(context: Context, singular: str, plural: str, num: int) -> str:
    return _catalog(context).ngettext(singular, plural, num)


@pass_context
def _pgettext(context: Context, msgctxt: str, message: str) -> str:
    return _catalog(context).pgettext(msgctxt, message)


@pass_context
def _npgettext(context: Context, msgctxt: str, singular: str, plural: str, num: int) -> str:
    return _catalog(context).npgettext(msgctxt, singular, plural, num)


env.install_gettext_callables(  # type: ignore[attr-defined]  # added by jinja2.ext.i18n
    gettext=_gettext, ngettext=_ngettext, pgettext=_pgettext, npgettext=_npgettext, newstyle=True
)


@pass_context
def _number_filter(context: Context, value: float, digits: int | None = None) -> str:
    return format_number(value, context["locale"], digits)


@pass_context
def _percent_filter(context: Context, value: float) -> str:
    return format_share(value, context["locale"])


env.filters.update(
    md=markdown, md_inline=markdown_inline, number=_number_filter, percent=_percent_filter
)
env.globals.update(LOCALES=LOCALES, LANGUAGE_NAMES=LANGUAGE_NAMES)
env.globals.update(highlight_block=highlight_block, weights_chart_data=weights_chart)
env.globals.update(static_url=static_url)  # fingerprinted URLs (app/static_files.py)


@dataclass(frozen=True)
class Neighbours:
    previous: Any
    next: Any


def _neighbours(lessons: list[Any], current: str) -> Neighbours:
    """The lessons before and after `current` in the course that can be opened (or None)."""
    ids = [entry.id for entry in lessons]
    at = ids.index(current) if current in ids else -1
    before = [entry for entry in lessons[:at] if entry.available] if at >= 0 else []
    after = [entry for entry in lessons[at + 1 :] if entry.available] if at >= 0 else []
    return Neighbours(before[-1] if before else None, after[0] if after else None)


env.globals.update(neighbours=_neighbours)  # the lesson page's previous/next links
install_csrf_globals(env)  # csrf_token(), csrf_field()
install_account_globals(env)  # current_user()
install_page_slot_globals(env)  # slot(), csp_nonce(); csrf_*() give markers in cached renders
templates = Jinja2Templates(env=env)


def render(
    request: Request, name: str, *, locale: str, status_code: int = 200, **context: Any
) -> HTMLResponse:
    """Render a page in `locale`: its catalog (cached per locale) goes into this render's
    context, where the installed gettext callables and the number filters find it."""
    return templates.TemplateResponse(
        request,
        name,
        {"locale": locale, "translations": translations(locale), **context},
        status_code=status_code,
    )
