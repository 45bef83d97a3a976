"""One log line per request, with how long the server took to answer it.

Replaces uvicorn's access log (which has no durations): `event=request`, the method, the path
(never the query string: it may carry a cursor or a token), the status, the peer address as
the app sees it, and `ms`, from the request reaching the app to its response's first byte. A
`?wait` request's `ms` includes its wait. The overload bench (bench/overload.py) reads these
lines to tell the server's answer times from its own load generator's delays.
"""

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gradlab.logs import fields

log = logging.getLogger("gradlab.access")


class AccessLogMiddleware:
    """Pure ASGI, outermost: it times every response, the middlewares' own refusals too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        answered: list[tuple[int, float]] = []

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                answered.append((message["status"], time.perf_counter() - started))
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            status, seconds = answered[0] if answered else (500, time.perf_counter() - started)
            client = scope.get("client")
            log.info(
                "%s %s %s",
                scope["method"],
                scope["path"],
                status,
                extra=fields(
                    event="request",
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    ms=round(seconds * 1000, 1),
                    client=client[0] if client else None,
                ),
            )
