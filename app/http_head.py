"""HEAD for every GET route: the GET's status and headers (its Content-Length too), no body.

Starlette's plain routes answer HEAD, FastAPI's do not (405): a link checker or a monitor that
asks `HEAD /en/lessons/...` was told the page does not allow it. The request is passed on as
a GET and its body dropped on the way out, so HEAD can never disagree with GET.
"""

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGetMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
