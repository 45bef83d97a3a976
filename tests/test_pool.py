"""The warm pool: fast grading from a forking zygote, and nothing of one job reaching the next."""

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import Content
from gradlab.results import GradeResult
from worker.grading import grade
from worker.pool import WarmPool
from worker.sandbox import _python_roots

CORPUS = Path(__file__).parent / "corpus" / "accumulate"
EXERCISE = "gradient-accumulation/accumulate"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmPool]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("pool"), max_wall_s=6)
    warm = WarmPool(settings, slots=1)
    yield warm
    warm.close()


def _grade(pool: WarmPool, content: Content, code: str, locale: str = "en") -> GradeResult:
    return grade(
        content=content,
        settings=pool.settings,
        exercise=EXERCISE,
        code=code,
        locale=locale,
        runner=pool.run,
    )


def _zygote_pid(pool: WarmPool) -> int:
    (slot,) = pool._free
    assert slot.process is not None
    return slot.process.pid


@pytest.mark.parametrize(
    ("file", "status", "detail"),
    [
        ("canonical.py", "passed", None),
        ("unscaled.py", "failed", "loss_not_scaled"),
        ("syntax_error.py", "error", "syntax_error"),
        ("runtime_error.py", "error", "runtime_error"),
        ("zero_every_microbatch.py", "failed", "zeroed_every_microbatch"),
    ],
)
def test_pool_grades_like_the_cold_path(
    pool: WarmPool, content: Content, file: str, status: str, detail: str | None
) -> None:
    result = _grade(pool, content, (CORPUS / file).read_text())
    assert result.status == status
    if status == "failed":
        assert result.diagnosis.code == detail
    if status == "error":
        assert result.error.kind == detail


def test_nothing_of_a_job_reaches_the_next(pool: WarmPool, content: Content) -> None:
    secret = "learner-one-secret-5521"
    first = textwrap.dedent(
        f"""
        # {secret}
        import subprocess
        for path in ("/scratch/s.txt", "/tmp/s.txt", "/dev/shm/s.txt"):
            open(path, "w").write("{secret}")
        subprocess.Popen(["sleep", "8124"], start_new_session=True)
        raise SystemExit
        """
    )
    _grade(pool, content, first)
    probe = textwrap.dedent(
        """
        import glob, json, os
        found = [p for d in ("/scratch", "/tmp", "/dev/shm") for p in glob.glob(d + "/*")]
        procs = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                procs.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" "))
            except OSError:
                pass
        print("FILES", json.dumps(found))
        print("SLEEPERS", sum(b"8124" in p for p in procs))
        print("SELF", [bytes(p) for p in procs if b"5521" in p])
        raise SystemExit
        """
    )
    out = _grade(pool, content, probe).output.stdout
    # a runtime bound under /tmp (a CI clone) shows its mount point there: not a leftover
    mount_points = {
        f"/tmp/{Path(root).relative_to('/tmp').parts[0]}"
        for root in _python_roots()
        if root.startswith("/tmp/")
    }
    files = json.loads(out.split("FILES ", 1)[1].splitlines()[0])
    assert set(files) <= mount_points, files
    assert "SLEEPERS 0" in out and "SELF []" in out
    assert secret not in out


def test_a_job_cannot_find_an_earlier_learners_code_in_memory(
    pool: WarmPool, content: Content
) -> None:
    """Every job is a fork of the zygote; the zygote never reads learner code, so a job's
    inherited memory holds no earlier job's code."""
    secret = "earlier-learner-code-9083417"
    _grade(pool, content, f"# {secret}\nraise SystemExit\n")
    scan = textwrap.dedent(
        """
        import re
        needle = b"7143809-edoc-renrael-reilrae"[::-1]  # exists once: this very object
        hits = 0
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
            for line in maps:
                m = re.match(r"([0-9a-f]+)-([0-9a-f]+) r", line)
                if not m or "[vvar]" in line or "[vsyscall]" in line:
                    continue
                start, end = int(m.group(1), 16), int(m.group(2), 16)
                try:
                    mem.seek(start)
                    hits += mem.read(end - start).count(needle)
                except (OSError, OverflowError, ValueError):
                    pass
        print("HITS", hits)
        raise SystemExit
        """
    )
    out = _grade(pool, content, scan).output.stdout
    assert "HITS 1\n" in out, out  # the needle itself, nothing else


def test_the_zygote_survives_a_job_that_attacks_it(pool: WarmPool, content: Content) -> None:
    before = _zygote_pid(pool)
    attack = textwrap.dedent(
        """
        import os, signal
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
            try:
                os.kill(1, sig)
            except OSError as exc:
                print("kill", sig, exc)
        try:
            open("/proc/1/mem", "rb").read(1)
        except OSError as exc:
            print("mem", type(exc).__name__)
        raise SystemExit
        """
    )
    result = _grade(pool, content, attack)
    assert "mem PermissionError" in result.output.stdout
    assert _zygote_pid(pool) == before  # same slot, not restarted
    assert _grade(pool, content, (CORPUS / "canonical.py").read_text()).status == "passed"


def test_a_timed_out_slot_is_replaced_and_grading_goes_on(pool: WarmPool, content: Content) -> None:
    (slot,) = pool._free
    old_cgroup = slot.cgroup.path if slot.cgroup else None
    old_pid = _zygote_pid(pool)
    result = _grade(pool, content, "while True:\n    pass\n", locale="tr")
    assert result.status == "error" and result.error.kind == "timeout"
    assert "6 saniye" in result.error.message
    assert _grade(pool, content, (CORPUS / "canonical.py").read_text()).status == "passed"
    assert _zygote_pid(pool) != old_pid  # the slot was killed whole and started afresh
    assert old_cgroup is None or not old_cgroup.exists()  # with everything that was in it
    assert not Path(f"/proc/{old_pid}").exists()


def test_warm_grades_are_fast_compared_with_cold(pool: WarmPool, content: Content) -> None:
    """Not a timing assertion on its own: warm and cold measured side by side, as a ratio."""
    import time

    code = (CORPUS / "canonical.py").read_text()
    started = time.monotonic()
    _grade(pool, content, code)
    warm = time.monotonic() - started
    started = time.monotonic()
    grade(content=content, settings=pool.settings, exercise=EXERCISE, code=code, locale="en")
    cold = time.monotonic() - started
    assert warm < cold / 2, (warm, cold)


def test_pool_needs_no_project_files(pool: WarmPool, content: Content) -> None:
    code = (
        f"import os\nprint('PROJECT', os.path.exists({str(PROJECT_ROOT / 'pyproject.toml')!r}))\n"
    )
    assert "PROJECT False" in _grade(pool, content, code + "raise SystemExit\n").output.stdout
    assert os.path.exists(PROJECT_ROOT / "pyproject.toml")
