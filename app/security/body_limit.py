"""Request bodies: capped while they are read, and JSON bodies checked for text a database
cannot store, before any route sees them.

**Size.** A body over its cap is refused with 413 as soon as the cap is crossed: at once when
`Content-Length` says so, otherwise when the bytes read so far pass it, so a 400 MB post costs
the server at most the cap (FastAPI would buffer and parse it whole first). The batch endpoint
has its own, larger cap (up to 100 submissions); every other request is small.

**Lone surrogates.** JSON may spell a UTF-16 surrogate half on its own (`"\\ud800"`). Python
decodes it into a `str` that cannot be encoded as UTF-8, so it would pass every validator and
fail only when a database or a response encodes it (a 500). Such a body is refused here with
422, whatever route or field it is meant for. Only bodies with a `\\uD8..`-`\\uDF..` escape in
them are decoded twice, so ordinary bodies cost nothing extra.
"""

import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
BODYLESS = {"GET", "HEAD", "OPTIONS", "DELETE"}


class BodyTooLarge(Exception):
    pass


async def _answer(send: Send, status: int, detail: object) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _has_lone_surrogate(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False  # not JSON: the route answers that (422)
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class BodyLimitMiddleware:
    """ASGI middleware: at most `cap` bytes per request body, or `caps[path]` for those paths."""

    def __init__(self, app: ASGIApp, *, cap: int, caps: dict[str, int]) -> None:
        self.app = app
        self.cap, self.caps = cap, caps

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in BODYLESS:
            await self.app(scope, receive, send)
            return
        cap = self.caps.get(scope["path"], self.cap)
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"").strip()
        too_large = f"the request body is over the limit of {cap} bytes"
        if declared.isdigit() and int(declared) > cap:
            await _answer(send, 413, too_large)  # refused before a byte of it is read
            return
        # Read the whole body here (the route would buffer it anyway), counting as it comes.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cap:
                await _answer(send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        is_json = content_type == b"application/json" or content_type.endswith(b"+json")
        if is_json and SURROGATE_ESCAPE.search(body) and _has_lone_surrogate(body):
            invalid = {
                "loc": ["body"],
                "msg": "the body holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape "
                "without its pair), which is not text",
                "type": "unicode_invalid",
            }
            await _answer(send, 422, [invalid])
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as Starlette does

        await self.app(scope, replay, send)
