"""gzip: what a client accepts, and the per-response compression of what the app renders.

Static files are gzipped once, ahead (app/static_files.py); everything else (HTML, JSON, the
sitemap) over 1 KiB is compressed per response by Starlette's middleware at level 6, except
for a client that refuses gzip with `q=0`, which Starlette's own check does not read.
"""

from starlette.datastructures import Headers
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

REFUSED = {"q=0", "q=0.0", "q=0.00", "q=0.000"}


def accepts_gzip(headers: Headers) -> bool:
    """`Accept-Encoding` names gzip (or `*`) without `q=0`."""
    return gzip_accepted(headers.get("accept-encoding", ""))


def gzip_accepted(accept_encoding: str) -> bool:
    """An `Accept-Encoding` value names gzip (or `*`) without `q=0`."""
    for part in accept_encoding.lower().split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip() in ("gzip", "*"):
            return params.replace(" ", "") not in REFUSED
    return False


class RenderedGZipMiddleware:
    def __init__(self, app: ASGIApp, *, precompressed: tuple[str, ...]) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=1024, compresslevel=6)
        self.precompressed = precompressed  # path prefixes served gzipped already

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.precompressed):
            await self.app(scope, receive, send)
        elif accepts_gzip(Headers(scope=scope)):
            await self.gzip(scope, receive, send)
        else:
            await self.app(scope, receive, send)
