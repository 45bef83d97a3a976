"""cgroups for the sandboxes: caps on what a slot and each of its phases may use, and the
kernel's own account of what a phase did use, read by the trusted worker from outside.

Layout, in every hierarchy we use (v1: `pids`, `memory` and `cpuacct` each mounted on their
own; v2: one tree), under this process's own cgroup:

    gradlab/slot-<id>/           the slot: processes and memory of the whole sandbox
    gradlab/slot-<id>/zygote/    bwrap and the zygote (cgroup v2 allows processes in leaves only)
    gradlab/slot-<id>/phase-<id>/  one forked job process, moved here by the worker before it
                                 reads its job: its caps, its memory peak and its CPU time

Why this is a witness the learner cannot touch: the peak (`memory.max_usage_in_bytes` in v1,
`memory.peak` in v2) and the CPU time (`cpuacct.usage`, `cpu.stat`) are kept by the kernel for
every process of the phase (threads, children and tmpfs pages included) and read by the worker,
outside the sandbox, where no cgroup filesystem is even mounted. A phase's cgroup is fresh, and a
process moved into it keeps its earlier charges where they were, so the peak counts only what the
phase itself allocated.

`pids` (RLIMIT_NPROC does not bind root's processes) also lets the worker kill every process of a
job however it tried to escape its process group; `memory` counts shared mappings and tmpfs
pages, which RLIMIT_DATA does not.
"""

import contextlib
import logging
import os
import signal
import time
import uuid
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

CONTROLLERS = ("pids", "memory", "cpuacct")  # v1 names; v2 has pids, memory and cpu.stat
MOUNTINFO = Path("/proc/self/mountinfo")
OWN_CGROUPS = Path("/proc/self/cgroup")


@lru_cache(maxsize=1)
def roots() -> dict[str, Path]:
    """Per controller, the folder under which gradlab makes its cgroups (`<our cgroup>/gradlab`),
    where that controller is mounted; {} when no hierarchy is usable. v2 counts as one folder for
    all three (`cpu.stat` exists there without the cpu controller)."""
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in MOUNTINFO.read_text(encoding="utf-8").splitlines():
        head, _, tail = line.partition(" - ")
        mount_point, (fstype, _source, options) = head.split()[4], tail.split()[:3]
        if fstype == "cgroup":
            for name in set(options.split(",")) & set(CONTROLLERS):
                v1[name] = Path(mount_point)
        elif fstype == "cgroup2":
            v2 = Path(mount_point)
    own = {}
    for line in OWN_CGROUPS.read_text(encoding="utf-8").splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else ["v2"]:
            own[name] = path.lstrip("/")
    if {"pids", "memory"} <= set(v1):
        return {name: mount / own.get(name, "") / "gradlab" for name, mount in v1.items()}
    if v2 is not None:
        controllers = _read(v2 / "cgroup.controllers").split()
        if {"pids", "memory"} <= set(controllers):
            return dict.fromkeys(CONTROLLERS, v2 / "gradlab")
    return {}


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii")
    except OSError:
        return ""


def _v2(folder: Path) -> bool:
    return (folder / "cgroup.controllers").exists()


class Cgroup:
    """One node of the layout above, in every hierarchy (`dirs`: controller -> folder)."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @property
    def folders(self) -> list[Path]:
        return sorted(set(self.dirs.values()))

    @property
    def path(self) -> Path:
        return self.dirs["pids"]

    @classmethod
    def slot(cls, *, max_pids: int, memory_mb: int) -> "Cgroup | None":
        """A fresh slot cgroup with its `zygote` leaf, or None where we may not make one."""
        base = roots()
        if not base:
            return None
        name = f"slot-{uuid.uuid4().hex[:12]}"
        try:
            for folder in set(base.values()):
                folder.mkdir(parents=True, exist_ok=True)
                if _v2(folder):
                    (folder / "cgroup.subtree_control").write_text("+pids +memory")
            slot = cls({controller: folder / name for controller, folder in base.items()})
            slot._make(max_pids=max_pids + 8, memory_mb=memory_mb)  # + bwrap and the zygote
            slot.child("zygote")
        except OSError as exc:
            log.warning("no slot cgroup (%s): jobs are neither capped nor measured by it", exc)
            return None
        return slot

    def at(self, name: str) -> "Cgroup":
        """The cgroup `name` below this one (made or not)."""
        return Cgroup({controller: folder / name for controller, folder in self.dirs.items()})

    def child(
        self, name: str, *, max_pids: int | None = None, memory_mb: int | None = None
    ) -> "Cgroup":
        """A new cgroup below this one, with its own caps; OSError if it cannot be made."""
        for folder in self.folders:
            if _v2(folder) and not _read(folder / "cgroup.subtree_control").strip():
                (folder / "cgroup.subtree_control").write_text("+pids +memory")
        node = self.at(name)
        node._make(max_pids=max_pids, memory_mb=memory_mb)
        return node

    def _make(self, *, max_pids: int | None, memory_mb: int | None) -> None:
        for folder in self.folders:
            folder.mkdir()
        if max_pids is not None:
            (self.dirs["pids"] / "pids.max").write_text(str(max_pids))
        if memory_mb is not None:
            self.limit_memory(memory_mb)

    def limit_memory(self, memory_mb: int) -> None:
        """Cap the memory (and swap) it may be charged for."""
        memory, limit = self.dirs["memory"], str(memory_mb << 20)
        if _v2(memory):
            (memory / "memory.max").write_text(limit)
            (memory / "memory.swap.max").write_text("0")
        else:
            (memory / "memory.limit_in_bytes").write_text(limit)
            with contextlib.suppress(OSError):  # no swap accounting on many kernels
                (memory / "memory.memsw.limit_in_bytes").write_text(limit)

    def enter(self, pid: int = 0) -> None:
        """Move process `pid` (0: the caller) into this cgroup, in every hierarchy."""
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(pid or os.getpid()))

    def procs(self) -> set[int]:
        return {int(p) for p in _read(self.path / "cgroup.procs").split()}

    def peak_bytes(self) -> int | None:
        """The most memory charged to this cgroup at any moment since it was made."""
        memory = self.dirs["memory"]
        raw = _read(memory / ("memory.peak" if _v2(memory) else "memory.max_usage_in_bytes"))
        return int(raw) if raw.strip().isdigit() else None

    def cpu_ns(self) -> int | None:
        """CPU time (user + system) its processes have used, in nanoseconds."""
        folder = self.dirs.get("cpuacct")
        if folder is None:
            return None
        if _v2(folder):
            for line in _read(folder / "cpu.stat").splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec" and value.strip().isdigit():
                    return int(value) * 1000
            return None
        raw = _read(folder / "cpuacct.usage")
        return int(raw) if raw.strip().isdigit() else None

    def memory_limit_hits(self) -> int:
        """How often it ran into its memory cap (v1 failcnt, v2 `max` events, plus
        out-of-memory kills): a job that hit it and then crashed or crawled past its wall
        clock ran out of memory."""
        memory = self.dirs["memory"]
        hits = 0
        with contextlib.suppress(ValueError):
            hits += int(_read(memory / "memory.failcnt") or 0)  # v1
        for name in ("memory.events", "memory.oom_control"):  # v2, v1
            for line in _read(memory / name).splitlines():
                key, _, value = line.partition(" ")
                if key in ("max", "oom_kill") and value.strip().isdigit():
                    hits += int(value)
        return hits

    def kill_all(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in it (children included) until it is empty; killed
        processes leave only once reaped, so this waits for that too."""
        deadline = time.monotonic() + timeout_s
        while pids := self._all_procs():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise OSError(f"{self.path}: processes {sorted(pids)} survive SIGKILL")
            time.sleep(0.01)

    def _all_procs(self) -> set[int]:
        found: set[int] = set()
        for folder, _, _ in os.walk(self.path):
            found |= {int(p) for p in _read(Path(folder) / "cgroup.procs").split()}
        return found

    def remove(self) -> None:
        """Kill what is left in it, then remove it and its children (deepest first)."""
        try:
            self.kill_all()
            for folder in self.folders:
                for sub, _, _ in sorted(os.walk(folder), key=lambda w: -len(w[0])):
                    Path(sub).rmdir()
        except OSError:
            log.warning("could not remove %s", self.path)

    @classmethod
    def sweep(cls, older_than_s: float = 600.0) -> None:
        """Remove slot cgroups left empty by workers that died. rmdir only succeeds on empty
        ones, and the age keeps it off a cgroup another worker has just made."""
        for folder in set(roots().values()):
            for stale in folder.glob("slot-*") if folder.is_dir() else ():
                with contextlib.suppress(OSError):
                    if time.time() - stale.stat().st_mtime > older_than_s:
                        for sub, _, _ in sorted(os.walk(stale), key=lambda w: -len(w[0])):
                            Path(sub).rmdir()
