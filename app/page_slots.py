"""Slots: the per-request holes in a page whose shared part is rendered once and cached.

A page rendered for the cache (`app/page_cache.py`) gets `page_slots=True` in its context. Then
every per-request value a template asks for comes out as a *marker* instead of the value:
`csrf_token()` / `csrf_field()` (the learner's CSRF token), `csp_nonce()` (this response's CSP
nonce), and whatever a template names with `slot(name)` (the header's account corner, a quiz
outcome). The cache splits the rendered HTML at the markers; serving a page joins the cached
pieces with this request's values. Rendered normally (no `page_slots`), the same globals give
the real values, so a template works both ways.

A marker is `gradlab-slot-<random per process>[<name>]`: letters, digits, `-`, `[`, `]` and the
name, nothing HTML escaping changes, and nothing lesson content can contain by accident.
"""

import re
import secrets
from collections.abc import Callable
from typing import Any

from jinja2 import Environment, pass_context
from jinja2.runtime import Context
from markupsafe import Markup

from app.security.csrf import FIELD

SLOTS = "page_slots"  # context flag: render the shared part, per-request values as markers
CSRF_TOKEN = "csrf_token"
CSP_NONCE = "csp_nonce"
_PREFIX = f"gradlab-slot-{secrets.token_hex(8)}"
_NAME = r"[A-Za-z0-9_.:-]+"
SPLIT = re.compile(rf"{_PREFIX}\[({_NAME})\]")


def marker(name: str) -> Markup:
    if not re.fullmatch(_NAME, name):
        raise ValueError(f"bad slot name {name!r}")
    return Markup(f"{_PREFIX}[{name}]")


def split(html: str) -> list[str]:
    """[text, slot name, text, slot name, ..., text]: even items are HTML, odd ones names."""
    return SPLIT.split(html)


def _slotted(context: Context) -> bool:
    return bool(context.get(SLOTS))


def install_template_globals(env: Environment) -> None:
    """`slot(name)` and `csp_nonce()`, and slot-aware `csrf_token()` / `csrf_field()` (install
    after app.security.csrf's, which they wrap)."""
    token: Callable[..., Any] = env.globals["csrf_token"]  # type: ignore[assignment]
    field: Callable[..., Any] = env.globals["csrf_field"]  # type: ignore[assignment]

    @pass_context
    def csrf_token(context: Context) -> str:
        return marker(CSRF_TOKEN) if _slotted(context) else token(context)

    @pass_context
    def csrf_field(context: Context) -> Markup:
        if _slotted(context):
            return Markup('<input type="hidden" name="{}" value="{}">').format(
                FIELD, marker(CSRF_TOKEN)
            )
        return field(context)

    @pass_context
    def csp_nonce(context: Context) -> str:
        """This response's CSP nonce (app/security_headers.py)."""
        if _slotted(context):
            return marker(CSP_NONCE)
        return context["request"].state.csp_nonce

    @pass_context
    def slot(context: Context, name: str) -> Markup:
        if not _slotted(context):
            raise RuntimeError(f"slot({name!r}) outside a cached render: guard it with page_slots")
        return marker(name)

    env.globals.update(csrf_token=csrf_token, csrf_field=csrf_field, csp_nonce=csp_nonce, slot=slot)
