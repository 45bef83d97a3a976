"""Content hot reload: the web app and the worker read the course through a `ContentStore`,
which notices edited files and reloads them without a restart.

A broken edit never takes the site down: the store keeps serving the last good content and
keeps the error (every `file:line` problem) for the author to see, until a later edit fixes it.
"""

import logging
import threading
import time
from pathlib import Path

from gradlab.content.loader import Content, load_content
from gradlab.content.yamlfile import ContentError

log = logging.getLogger(__name__)
WATCHED_SUFFIXES = {".yaml", ".yml", ".py"}


def fingerprint(content_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """What identifies the current state of the content files: paths, mtimes and sizes."""
    entries = []
    for path in sorted(content_dir.rglob("*")):
        if path.suffix in WATCHED_SUFFIXES and path.is_file():
            stat = path.stat()
            entries.append((str(path.relative_to(content_dir)), stat.st_mtime_ns, stat.st_size))
    return tuple(entries)


class ContentStore:
    def __init__(self, content_dir: Path, *, check_interval_s: float = 1.0) -> None:
        """Load the content now (a broken course at startup is an error: there is no last
        good version to fall back to). `check_interval_s` <= 0 turns reloading off."""
        self.content_dir = content_dir
        self.check_interval_s = check_interval_s
        self._lock = threading.Lock()
        self._fingerprint = fingerprint(content_dir)
        self._content = load_content(content_dir)
        self._checked_at = time.monotonic()
        self.error: ContentError | None = None  # the last reload's problems, if it failed
        self.loaded_at = time.time()

    def get(self) -> Content:
        """The current content; at most once per interval, look for edits first."""
        if (
            self.check_interval_s > 0
            and time.monotonic() - self._checked_at >= self.check_interval_s
        ):
            self.refresh()
        return self._content

    def refresh(self) -> bool:
        """Reload if any file changed. Returns True when new content was taken."""
        with self._lock:
            self._checked_at = time.monotonic()
            current = fingerprint(self.content_dir)
            if current == self._fingerprint:
                return False
            self._fingerprint = current
            try:
                content = load_content(self.content_dir)
            except ContentError as exc:
                self.error = exc
                log.error("content edit rejected, still serving the last good version:\n%s", exc)
                return False
            self._content, self.error, self.loaded_at = content, None, time.time()
            log.info("content reloaded from %s", self.content_dir)
            return True
