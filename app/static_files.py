"""Static files (/static, and Swagger UI's files under /docs): fingerprinted, compressed once.

Pages link every file by a URL that carries a digest of its bytes (`static_url("css/site.css")`
-> `/static/css/site.3f2a1b9c0d1e.css`). The bytes behind such a URL never change, so it is
sent with `Cache-Control: public, max-age=31536000, immutable`: a browser asks for it once per
deploy that changes it, never to revalidate. The plain URL (`/static/css/site.css`) and an
outdated digest (a page rendered before a deploy) get the current bytes with `no-cache` (an
ETag revalidation each time), never a stale file cached for a year.

Text files (CSS, JS, SVG, JSON, source maps) are gzipped once when first read, and sent gzipped
to clients that accept it (`Vary: Accept-Encoding`), with an ETag per encoding. A file is read
again when its size or mtime changes (an author editing CSS under `gradlab serve` sees it on
the next request). `If-None-Match` is answered 304.

Only files found by walking the directory are served: a path is a key in that index, never
joined to the file system, so no `..` or symlink leads outside it; hidden files are skipped.
"""

import gzip
import hashlib
import mimetypes
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from app.compression import accepts_gzip
from app.http_cache import if_none_match
from gradlab.config import PROJECT_ROOT

IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")
DIGEST_CHARS = 12
FINGERPRINTED = re.compile(
    rf"^(?P<stem>.+)\.(?P<digest>[0-9a-f]{{{DIGEST_CHARS}}})(?P<ext>\.[^./]+)$"
)
RESCAN_AFTER_S = 1.0  # a path not in the index walks the directory again at most this often
mimetypes.add_type("application/javascript", ".mjs")


@dataclass(frozen=True)
class Asset:
    """One file's bytes as served: plain and (when it saves bytes) gzipped."""

    path: str  # relative, with "/" separators
    body: bytes
    gzipped: bytes | None
    digest: str
    media_type: str
    stamp: tuple[int, int]  # (mtime_ns, size) of the file read

    def fingerprinted(self) -> str:
        stem, dot, ext = self.path.rpartition(".")
        return f"{stem}.{self.digest}.{ext}" if dot and "/" not in ext else self.path


def _read(root: Path, relative: str, stamp: tuple[int, int]) -> Asset:
    body = (root / relative).read_bytes()
    media_type = mimetypes.guess_type(relative)[0] or "application/octet-stream"
    if media_type.startswith("text/") or media_type == "application/javascript":
        media_type += "; charset=utf-8"
    gzipped = None
    if media_type.startswith(COMPRESSIBLE) and len(body) > 512:
        packed = gzip.compress(body, compresslevel=9, mtime=0)
        gzipped = packed if len(packed) < len(body) * 0.9 else None
    digest = hashlib.sha256(body).hexdigest()[:DIGEST_CHARS]
    return Asset(relative, body, gzipped, digest, media_type, stamp)


class StaticAssets:
    """An ASGI app serving the files under `root`, mounted at `prefix`."""

    def __init__(self, root: Path, prefix: str) -> None:
        self.root, self.prefix = root, prefix.rstrip("/")
        self._assets: dict[str, Asset] = {}
        self._files: set[str] = set()
        self._scanned_at = float("-inf")
        self._lock = threading.Lock()

    def url(self, path: str) -> str:
        """The fingerprinted URL of `path` (relative to root); raises KeyError for no such file,
        so a template's typo fails its render rather than the browser's fetch."""
        asset = self._asset(path)
        if asset is None:
            raise KeyError(f"no static file {path!r} under {self.root}")
        return f"{self.prefix}/{asset.fingerprinted()}"

    def _scan(self) -> None:
        files = set()
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "node_modules"]
            base = Path(folder).relative_to(self.root)
            files.update((base / n).as_posix() for n in names if not n.startswith("."))
        self._files, self._scanned_at = files, time.monotonic()

    def _asset(self, path: str) -> Asset | None:
        with self._lock:
            if path not in self._files and time.monotonic() - self._scanned_at > RESCAN_AFTER_S:
                self._scan()
            if path not in self._files:
                return None
            try:
                stat = (self.root / path).stat()
            except OSError:
                return None
            stamp = (stat.st_mtime_ns, stat.st_size)
            asset = self._assets.get(path)
            if asset is None or asset.stamp != stamp:
                asset = self._assets[path] = _read(self.root, path, stamp)
            return asset

    def _lookup(self, path: str) -> tuple[Asset | None, bool]:
        """The asset for a request path, and whether the URL named its current digest."""
        asset = self._asset(path)
        if asset is not None:
            return asset, False
        match = FINGERPRINTED.match(path)
        if match is None:
            return None, False
        asset = self._asset(match["stem"] + match["ext"])
        return asset, asset is not None and asset.digest == match["digest"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        path = scope["path"][len(scope.get("root_path", "")) :].removeprefix(self.prefix)
        response = self.respond(scope["method"], path.lstrip("/"), Headers(scope=scope))
        await response(scope, receive, send)

    def respond(self, method: str, path: str, headers: Headers) -> Response:
        if method != "GET":  # HEAD comes here as GET (app/http_head.py)
            return PlainTextResponse("Method Not Allowed", 405, headers={"Allow": "GET, HEAD"})
        asset, current = self._lookup(path)
        if asset is None:
            return PlainTextResponse("Not Found", 404)
        body, etag = asset.body, f'"{asset.digest}"'
        response_headers = {
            "Cache-Control": IMMUTABLE if current else REVALIDATE,
            "Content-Type": asset.media_type,
        }
        if asset.gzipped is not None:
            response_headers["Vary"] = "Accept-Encoding"
            if accepts_gzip(headers):
                body, etag = asset.gzipped, f'"{asset.digest}-gz"'
                response_headers["Content-Encoding"] = "gzip"
        response_headers["ETag"] = etag
        if if_none_match(headers.get("if-none-match"), etag):
            return Response(status_code=304, headers=response_headers)
        return Response(body, status_code=200, headers=response_headers)


SITE_ASSETS = StaticAssets(PROJECT_ROOT / "static", prefix="/static")
static_url = SITE_ASSETS.url
