"""Lesson pages answered from the page cache before FastAPI's router.

A lesson page (`GET /{locale}/lessons/{lesson}`) is the site's most requested answer, and its
route does little: the shared part comes from `app/page_cache.py`, the per-request parts are a
CSRF token, a CSP nonce and the site's address. Yet the router, the dependency machinery and
five middlewares cost several times that work per request. This pure-ASGI middleware answers
the common case itself with the same bytes and headers the route would send (tests compare the
two), and hands everything else to the app untouched:

- only `GET` without a query string, on a known locale and lesson whose page is already cached
  for the current content (the first request renders it through the route);
- only a returning visitor with a valid learner cookie (a new one gets the cookie from
  `LearnerCookieMiddleware`), nobody who may be signed in (a session cookie or an
  `Authorization` header: the account corner is a database lookup).

**Compression without compressing per response.** Every static piece of a page (the HTML
between slots, and the slot variants that are the same for everyone) is deflated once, on its
own, ending in a sync flush, so that each piece's compressed bytes stand alone and end on a byte
boundary. A response's gzip body is the pieces' compressed bytes in order, the per-request
values (a few dozen bytes) as stored deflate blocks between them, the final empty block and the
gzip trailer (the CRC-32 and length of the whole page). Browsers get a compressed page for the
cost of a CRC.
"""

import secrets
import struct
import zlib
from html import escape

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.datastructures import URL
from starlette.requests import cookie_parser
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.accounts.auth import SESSION_COOKIE
from app.compression import gzip_accepted
from app.http_cache import if_none_match
from app.learner import COOKIE as LEARNER_COOKIE
from app.page_cache import (
    ACCOUNT_NAV,
    ANONYMOUS,
    PRIVATE_HTML,
    CachedPage,
    PageCache,
    page_etag,
    slot_values,
)
from app.page_slots import CSP_NONCE, CSRF_TOKEN
from app.security.csrf import CsrfTokens
from app.security_headers import COMMON, NONCE_BYTES, policy
from gradlab.config import LOCALES
from gradlab.content.store import ContentStore

GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no mtime, any OS
FINAL_BLOCK = b"\x03\x00"  # an empty final block (fixed Huffman): ends the deflate stream
MAX_STORED = 0xFFFF  # a stored block's length field
WINDOW = 32768  # deflate's window: how far back a match may point
KNOWN_LEARNERS = 4096  # verified learner cookies remembered (cookie -> its CSRF token)
KNOWN_PAGES = 256  # (page, site address) pairs kept encoded
KNOWN_SITES = 64  # (scheme, Host header) -> site address
# the per-response values and their lengths: a CSRF token is an unpadded base64 SHA-256 HMAC
# (app/security/csrf.py), a nonce `secrets.token_urlsafe(NONCE_BYTES)`
HOLES = {CSRF_TOKEN: 43, CSP_NONCE: 24}


def deflated(data: bytes, *, history: bytes = b"") -> bytes:
    """`data` as raw deflate blocks that stand alone: no final block, a byte-aligned end. With
    `history` (what a decoder will have written just before), it may refer back into it."""
    if history:
        compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS, zdict=history[-WINDOW:])
    else:
        compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)


def stored(data: bytes) -> bytes:
    """`data` as stored (uncompressed) deflate blocks: for the few bytes that change."""
    blocks = []
    for start in range(0, len(data), MAX_STORED):
        chunk = data[start : start + MAX_STORED]
        blocks.append(b"\x00" + struct.pack("<HH", len(chunk), len(chunk) ^ 0xFFFF) + chunk)
    return b"".join(blocks)


class _EncodedPage:
    """A cached page for one site address, as bytes with holes for the per-response values
    (the CSRF token and the CSP nonce, both of a fixed length), each text between them also
    deflated once. Each text is deflated with what comes before it as the dictionary, the holes
    as NUL bytes of their length: the decoder's window then holds the real values at the same
    distances, and no match can point into them (lesson HTML has no NUL byte)."""

    def __init__(self, page: CachedPage, site: str) -> None:
        self.page = page
        self.site = site
        self.nav = page.variants[ACCOUNT_NAV][ANONYMOUS]
        # the slots every anonymous visitor without a quiz outcome gets the same text for
        fixed = slot_values(page, csrf="", nonce="", nav=self.nav, outcome="", site=site)
        for hole in HOLES:
            del fixed[hole]
        self.etags: dict[str, bytes] = {}  # CSRF token -> ETag
        self.pieces: list[tuple[bytes, bytes] | str] = []  # (raw, deflated) or a hole's name
        text: list[str] = []
        history = b""
        for index, part in enumerate(page.parts):
            if index % 2 == 0 or part in fixed:
                text.append(part if index % 2 == 0 else fixed[part])
                continue
            history = self._close(text, history)
            self.pieces.append(part)
            history += b"\0" * HOLES[part]
        self._close(text, history)

    def _close(self, text: list[str], history: bytes) -> bytes:
        raw = "".join(text).encode()
        text.clear()
        if b"\0" in raw:  # never in HTML; without it the dictionary would be unsafe
            raise ValueError("a NUL byte in a page")
        self.pieces.append((raw, deflated(raw, history=history)))
        return history + raw

    def etag(self, csrf: str) -> bytes:
        """The route's ETag for this learner (app/page_cache.py `page_etag`)."""
        etag = self.etags.get(csrf)
        if etag is None:
            if len(self.etags) >= KNOWN_LEARNERS:
                self.etags.clear()
            value = page_etag(self.page, csrf=csrf, nav=self.nav, outcome="", site=self.site)
            etag = self.etags[csrf] = value.encode()
        return etag

    def body(self, values: dict[str, str], *, gzip: bool) -> bytes | None:
        """The page with `values` in its holes (gzipped when asked); None if a value's length
        is not its hole's (then the route answers)."""
        out: list[bytes] = []
        crc = size = 0
        for piece in self.pieces:
            if isinstance(piece, str):
                raw = values[piece].encode()
                if len(raw) != HOLES[piece]:
                    return None
                compressed = stored(raw) if gzip else b""
            else:
                raw, compressed = piece
            if gzip:
                out.append(compressed)
                crc = zlib.crc32(raw, crc)
                size += len(raw)
            else:
                out.append(raw)
        if not gzip:
            return b"".join(out)
        trailer = struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)
        return GZIP_HEADER + b"".join(out) + FINAL_BLOCK + trailer


def _locale_cookie(locale: str) -> bytes:
    """The Set-Cookie the lesson route sends (app/routes/pages.py `_remember`)."""
    from app.routes.pages import LOCALE_COOKIE  # the route's own name for it

    response = Response()
    response.set_cookie(LOCALE_COOKIE, locale, max_age=365 * 24 * 3600, samesite="lax")
    return response.headers["set-cookie"].encode("latin-1")


class CachedLessonsMiddleware:
    """Answers cached lesson pages for returning anonymous visitors (see the module docstring);
    sits inside the access log, outside everything else."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        content_store: ContentStore,
        page_cache: PageCache,
        secret_key: str,
        csrf: CsrfTokens,
        public_base_url: str | None,
    ) -> None:
        self.app = app
        self.store = content_store
        self.cache = page_cache
        self.learners = URLSafeSerializer(secret_key, salt="learner")  # app/learner.py's
        self.csrf = csrf
        self.site = escape(public_base_url.rstrip("/")) if public_base_url else None
        self.known: dict[bytes, str] = {}  # learner cookie header -> its CSRF token
        self.sites: dict[tuple[str, bytes | None], str] = {}  # (scheme, Host) -> site address
        self.encoded: dict[tuple[int, str], _EncodedPage] = {}  # (id(page), site) -> bytes
        # what every answer of a locale carries, as the route sends it
        common = [(b"cache-control", PRIVATE_HTML.encode())]
        common += [(name.lower().encode(), value.encode()) for name, value in COMMON.items()]
        self.headers = {
            locale: [(b"set-cookie", _locale_cookie(locale)), *common] for locale in LOCALES
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = self._answer(scope) if scope["type"] == "http" else None
        if answer is None:
            await self.app(scope, receive, send)
            return
        status, headers, body = answer
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _answer(self, scope: Scope) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        """The response, or None where the app must answer."""
        if scope["method"] != "GET" or scope["query_string"]:
            return None
        segments = scope["path"].split("/")
        if len(segments) != 4 or segments[0] or segments[2] != "lessons":
            return None
        locale, lesson = segments[1], segments[3]
        common = self.headers.get(locale)
        if common is None:
            return None
        cookie = host = if_none = encoding = None
        for name, value in scope["headers"]:
            if name == b"cookie":
                if cookie is not None:  # split cookie headers: let Starlette read them
                    return None
                cookie = value
            elif name == b"host":
                host = value
            elif name == b"if-none-match":
                if_none = value
            elif name == b"accept-encoding":
                encoding = value
            elif name == b"authorization":
                return None
        csrf = self._csrf(cookie)
        if csrf is None:
            return None
        page = self.cache.get(self.store.get(), ("lesson", lesson, locale))
        if page is None:
            return None
        encoded = self._encoded(page, self.site or self._request_site(scope, host))
        etag = encoded.etag(csrf)
        headers = [(b"etag", etag), *common]
        if if_none is not None and if_none_match(if_none.decode("latin-1"), etag.decode()):
            return 304, headers, b""
        nonce = secrets.token_urlsafe(NONCE_BYTES)
        gzip = encoding is not None and gzip_accepted(encoding.decode("latin-1"))
        body = encoded.body({CSRF_TOKEN: csrf, CSP_NONCE: nonce}, gzip=gzip)
        if body is None:
            return None
        headers += [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", policy(nonce).encode()),
        ]
        if gzip:
            headers += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
        return 200, headers, body

    def _csrf(self, cookie_header: bytes | None) -> str | None:
        """The CSRF token of a returning anonymous learner; None for anyone else."""
        if cookie_header is None:
            return None
        token = self.known.get(cookie_header)
        if token is not None:
            return token
        jar = cookie_parser(cookie_header.decode("latin-1"))  # as `request.cookies` parses
        raw = jar.get(LEARNER_COOKIE)
        if SESSION_COOKIE in jar or not raw:
            return None
        try:
            learner_id = str(self.learners.loads(raw))
        except BadSignature:
            return None
        if len(self.known) >= KNOWN_LEARNERS:
            self.known.clear()
        token = self.known[cookie_header] = self.csrf.for_learner(learner_id)
        return token

    def _encoded(self, page: CachedPage, site: str) -> _EncodedPage:
        """`page` for this site address (and the anonymous variants), encoded once."""
        encoded = self.encoded.get((id(page), site))
        if encoded is None or encoded.page is not page:
            if len(self.encoded) >= KNOWN_PAGES:  # old content's pages, or many Host names
                self.encoded.clear()
            encoded = self.encoded[(id(page), site)] = _EncodedPage(page, site)
        return encoded

    def _request_site(self, scope: Scope, host: bytes | None) -> str:
        """What `app.discovery.base_url` gives without the setting (the request's own address),
        HTML-escaped."""
        key = (scope["scheme"], host)
        site = self.sites.get(key)
        if site is None:
            url = URL(scope=scope)
            if len(self.sites) >= KNOWN_SITES:
                self.sites.clear()
            site = self.sites[key] = escape(f"{url.scheme}://{url.netloc}".rstrip("/"))
        return site
