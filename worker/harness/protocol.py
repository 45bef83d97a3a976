"""Wire formats between a job process and the trusted worker.

Observations: one safetensors blob (tensors + a JSON string as metadata). safetensors holds only
raw numbers and a JSON header, so parsing it executes nothing; pickle is never used anywhere on
this path.

Clock frames (the go/done conversation of a timed block, on the phase's clock socket): a 4-byte
big-endian length, a JSON header, then `header["bytes"]` raw bytes. The job says "ready"; the
worker notes the time and answers "go" with a fresh nonce; the job does the work that nonce
selects and answers "done" with its result, and the worker notes the time again.
"""

import json
import struct
from typing import Any

OBSERVATIONS_META_KEY = "gradlab"
OBSERVATIONS_VERSION = 2
# Written before the learner's code starts: without it, a failure is the platform's, not theirs.
READY_MARKER = b"GRADLAB-READY\n"
MAX_FRAME_HEADER = 4096
MAX_FRAME_BYTES = 16 << 20


def encode(tensors: dict[str, Any], meta: dict[str, Any]) -> bytes:
    from safetensors.torch import save

    payload = {"version": OBSERVATIONS_VERSION, **meta}
    return save(
        {name: t.contiguous() for name, t in tensors.items()},
        metadata={OBSERVATIONS_META_KEY: json.dumps(payload)},
    )


class FrameError(ValueError):
    """The other side broke the frame format."""


def frame(header: dict[str, Any], data: bytes = b"") -> bytes:
    encoded = json.dumps({**header, "bytes": len(data)}).encode()
    return struct.pack(">I", len(encoded)) + encoded + data


def read_exactly(sock: Any, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise FrameError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: Any) -> tuple[dict[str, Any], bytes]:
    (size,) = struct.unpack(">I", read_exactly(sock, 4))
    if size > MAX_FRAME_HEADER:
        raise FrameError("frame header too large")
    try:
        header = json.loads(read_exactly(sock, size))
    except ValueError as exc:
        raise FrameError("frame header is not JSON") from exc
    length = header.get("bytes") if isinstance(header, dict) else None
    if (
        isinstance(length, bool)
        or not isinstance(length, int)
        or not 0 <= length <= MAX_FRAME_BYTES
    ):
        raise FrameError("bad frame length")
    return header, read_exactly(sock, length)
