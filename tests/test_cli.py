"""The `gradlab` command line as a user runs it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gradlab.config import PROJECT_ROOT

CORPUS = Path(__file__).parent / "corpus" / "accumulate"
EXERCISE = "gradient-accumulation/accumulate"


def _gradlab(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradlab.cli", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GRADLAB_DATA_DIR": str(tmp_path), **env},
    )


def test_grade_prints_a_result_object_and_exits_by_verdict(tmp_path: Path) -> None:
    passed = _gradlab("grade", EXERCISE, str(CORPUS / "canonical.py"), tmp_path=tmp_path)
    assert passed.returncode == 0, passed.stderr
    result = json.loads(passed.stdout)
    assert set(result) == {
        "status",
        "score",
        "error",
        "diagnosis",
        "checks",
        "notes",
        "output",
        "device",
        "timings",
        "locale",
    }
    assert result["status"] == "passed" and result["device"] in ("cpu", "cuda")

    failed = _gradlab(
        "grade", EXERCISE, str(CORPUS / "unscaled.py"), "--locale", "tr", tmp_path=tmp_path
    )
    assert failed.returncode == 1
    result = json.loads(failed.stdout)
    assert result["diagnosis"]["code"] == "loss_not_scaled" and result["locale"] == "tr"
    assert "accum_steps" in result["diagnosis"]["message"]
    assert "böl" in result["diagnosis"]["message"]  # Turkish: "divide"


def test_grade_rejects_unknown_exercise_and_missing_file(tmp_path: Path) -> None:
    unknown = _gradlab("grade", "nope/nope", str(CORPUS / "canonical.py"), tmp_path=tmp_path)
    assert unknown.returncode == 2 and "unknown exercise" in unknown.stderr
    missing = _gradlab("grade", EXERCISE, str(tmp_path / "missing.py"), tmp_path=tmp_path)
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_lessons_check_names_file_and_line(tmp_path: Path) -> None:
    ok = _gradlab("lessons", "check", tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stderr
    broken = tmp_path / "lessons"
    shutil.copytree(PROJECT_ROOT / "lessons", broken)
    en = broken / "gradient-accumulation" / "en.yaml"
    lines = en.read_text().splitlines()
    lines.insert(1, "titel: typo")
    en.write_text("\n".join(lines) + "\n")
    bad = _gradlab("lessons", "check", tmp_path=tmp_path, GRADLAB_CONTENT_DIR=str(broken))
    assert bad.returncode == 1
    assert f"{en}:2: error: titel: unknown key" in bad.stderr
