"""Structured logs: every submit/claim/finish line carries `submission_id` and `job_id`.

Callers pass the fields as `extra` (`log.info("claimed", extra=fields(event="claim", ...))`).
`GRADLAB_LOG_FORMAT=json` writes one JSON object per line (for a log shipper); `text` (the
default) writes the message followed by `key=value` pairs, readable in a terminal.
"""

import json
import logging
import os
import re
import sys
import threading
import time
from typing import Any

# attributes every LogRecord has; anything else on a record came in through `extra`
_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {"message", "asctime"}
_QUOTED = re.compile(r'[ "=\n]')  # a text value with any of these is written as a JSON string


def fields(**values: Any) -> dict[str, Any]:
    """`extra` for a structured line; None values are left out."""
    return {key: value for key, value in values.items() if value is not None}


def _extra(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and k[0] != "_"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_extra(record),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(name)s %(levelname)s %(message)s")
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """logging's own "2026-12-02 03:05:04,099", its seconds' text made once a second."""
        second, text = self._second  # one tuple: racing threads both make the same text
        if second != int(record.created):
            second = int(record.created)
            text = time.strftime(self.default_time_format, time.localtime(second))
            self._second = (second, text)
        return f"{text},{int(record.msecs):03d}"

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            text = super().format(record)  # with the traceback below
        else:  # the same line, without the machinery (a line per request on a busy server)
            record.message = record.getMessage()
            record.asctime = self.formatTime(record)
            text = f"{record.asctime} {record.name} {record.levelname} {record.message}"
        extra = _extra(record)
        if not extra:
            return text
        pairs = " ".join(f"{key}={_text_value(value)}" for key, value in extra.items())
        head, newline, rest = text.partition("\n")  # keep a traceback below the fields
        return f"{head} {pairs}{newline}{rest}"


def _text_value(value: Any) -> str:
    if isinstance(value, int | float):
        return str(value)  # never quoted (nan and inf included)
    text = str(value)
    return json.dumps(text) if not text or _QUOTED.search(text) else text


FLUSH_S = 0.2  # the longest an access line waits in the log's buffer
BUFFERED = frozenset({"gradlab.access"})  # loggers whose info lines may wait


class BufferedStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr through a buffer of its own, as nginx's `access_log ... flush=`: the access log's
    info lines are written out at most FLUSH_S later (a busy web process logs every request,
    and a write per line cost as much as the lesson page it logged); every other line at once
    (with the access lines before it, in order), so that a process killed right after a line
    has written it; everything at exit (`logging.shutdown`) and before a fork (a child never
    writes its parent's lines)."""

    def __init__(self) -> None:
        stream = open(  # noqa: SIM115  # closed with the process: the fd is stderr's
            sys.stderr.fileno(),
            "w",
            buffering=1 << 16,
            encoding="utf-8",
            errors="backslashreplace",
            closefd=False,
        )
        super().__init__(stream)
        self._flusher: threading.Thread | None = None
        os.register_at_fork(before=self.flush)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + self.terminator)
            if record.levelno >= logging.WARNING or record.name not in BUFFERED:
                self.stream.flush()
            elif self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_every, name="log-flush", daemon=True
                )
                self._flusher.start()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def _flush_every(self) -> None:
        while True:
            time.sleep(FLUSH_S)
            self.flush()


def configure_logging(log_format: str = "text", level: int = logging.INFO) -> None:
    """Root handler on stderr in the chosen format (replaces any handler set before)."""
    handler: logging.Handler
    try:
        handler = BufferedStderr()
    except (AttributeError, OSError, ValueError):  # a stderr without a file (captured, closed)
        handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Neither format writes where a call was made from, nor the process or thread: skip
    # gathering them for every record (the logging HOWTO's "Optimization"; a third of an access
    # log line's cost, and a lesson page's answer is about as cheap as its log line).
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
