"""Where a lesson page request's time goes, without sockets: the ASGI app called directly.

Usage: .venv/bin/python bench/page_profile.py [--path /en/lessons/gradient-accumulation]
       [--requests 1000] [--sort cumulative|tottime] [--profile]
Prints ms per request (one learner cookie, after a warm-up) and, with --profile, cProfile's
top functions. Work done in the thread pool (sync endpoints and dependencies) does not show up
in the profile, only as wall time. Absolute numbers depend on the machine and its load.
"""

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

from app.main import create_app
from gradlab.config import Settings

Headers = list[tuple[bytes, bytes]]


async def request(app: Any, path: str, headers: Headers) -> dict[str, Any]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    out: dict[str, Any] = {"body": b""}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"], out["headers"] = message["status"], message["headers"]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", default="/en/lessons/gradient-accumulation")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--sort", default="cumulative")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    app = create_app(Settings(data_dir=Path(tempfile.mkdtemp()), secret_key="bench"))
    first = await request(app, args.path, [(b"host", b"127.0.0.1:8000")])
    assert first["status"] == 200, first["status"]
    cookie = next(
        v.split(b";")[0]
        for k, v in first["headers"]
        if k == b"set-cookie" and v.startswith(b"gradlab_learner=")
    )
    headers = [(b"host", b"127.0.0.1:8000"), (b"cookie", cookie)]
    for _ in range(50):
        await request(app, args.path, headers)
    started = time.perf_counter()
    for _ in range(args.requests):
        last = await request(app, args.path, headers)
    per_request = (time.perf_counter() - started) / args.requests
    print(
        f"{args.path}: {per_request * 1e3:.3f} ms/request over {args.requests} "
        f"(status {last['status']}, {len(last['body'])} bytes)"
    )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(200):
            await request(app, args.path, headers)
        profiler.disable()
        pstats.Stats(profiler).sort_stats(args.sort).print_stats(30)


if __name__ == "__main__":
    asyncio.run(main())
