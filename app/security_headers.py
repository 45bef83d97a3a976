"""Security headers on every response, and a strict Content-Security-Policy on HTML.

The policy allows nothing inline: scripts, styles, images, fonts and connections come from the
site itself. The one exception is a fresh random nonce per HTML response in `style-src`: the
exercise editor (CodeMirror 6) mounts its base styles as a <style> element through style-mod,
and hands this nonce to it (`EditorView.cspNonce`). Templates read the nonce as
`request.state.csp_nonce` and put it only on the editor's <script> element, whose `nonce`
property the script reads (browsers hide the attribute from the DOM and from CSS selectors).
No template carries inline <script> or <style> or `style=` attributes (tests/test_feedback.py).
"""

import secrets

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'nonce-{nonce}'; "
    "img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
NONCE_BYTES = 18  # a nonce is `secrets.token_urlsafe(NONCE_BYTES)`: 24 characters
COMMON = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "strict-origin-when-cross-origin",
}


def policy(nonce: str) -> str:
    return POLICY.format(nonce=nonce)


class SecurityHeadersMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware): streams and background tasks pass through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(NONCE_BYTES)
        scope.setdefault("state", {})["csp_nonce"] = nonce

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in COMMON.items():
                    headers.setdefault(name, value)
                if headers.get("content-type", "").startswith("text/html"):
                    headers["Content-Security-Policy"] = policy(nonce)
            await send(message)

        await self.app(scope, receive, send_with_headers)
