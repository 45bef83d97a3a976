"""How far apart correct, wrong and cheating submissions land on each verdict's measure, through
the real warm pool: the evidence behind every tolerance and threshold (bench/RESULTS.md).

Per exercise, over its corpus (tests/corpus/<exercise>/, cheats included): the largest error of
a correct submission against the smallest of a wrong one (gradients and parameters); for lesson
2 the memory peaks against the trusted references; for amp-step the witness distances (to the
low-precision and to the float32 recomputation, in units of the gap between the two); for
profiling the speedups; for fit-the-budget the peak ratios.
Usage: .venv/bin/python bench/grader_margins.py [--device cuda] [--only EXERCISE]
"""

import argparse
import math
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import load_content
from worker.graders import graders
from worker.grading import grade
from worker.pool import WarmPool

CORPUS = PROJECT_ROOT / "tests" / "corpus"


def _capture(grader: Any, into: dict[str, Any]) -> None:
    """Keep the details of every judgement the grader makes (they are not in the result)."""
    judge = grader.judge

    def spy(run: Any, texts: Any) -> Any:
        judgement = judge(run, texts)
        into["details"] = judgement.details
        return judgement

    grader.judge = spy


def _fmt(values: list[float]) -> str:
    shown = [f"{v:.3g}" for v in values if v is not None and math.isfinite(v)]
    return ", ".join(shown) if shown else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--only", help="one exercise, e.g. mixed-precision/amp-step")
    args = parser.parse_args()
    settings = Settings(data_dir=Path(tempfile.mkdtemp()), device=args.device, max_wall_s=60)
    content = load_content(settings.content_dir)
    pool = WarmPool(settings, slots=1, use_gpu=args.device == "cuda")
    print(f"# grader margins, {time.strftime('%Y-%m-%d')}, {platform.node()}, {args.device}")
    try:
        for ref, grader in sorted(graders().items()):
            if args.only and ref != args.only:
                continue
            captured: dict[str, Any] = {}
            _capture(grader, captured)
            rows: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
            for path in sorted((CORPUS / ref.split("/")[1]).glob("*.py")):
                code = path.read_text()
                expected = code.splitlines()[0].removeprefix("# expect: ")
                if expected.startswith("error"):
                    continue
                captured.clear()
                result = grade(content=content, settings=settings, exercise=ref, code=code,
                               locale="en", runner=pool.run)  # fmt: skip
                kind = "cheat" if path.stem.startswith("cheat_") else expected.split()[0]
                rows[kind].append((path.stem, captured.get("details", {})))
                got = result.diagnosis.code if result.diagnosis else result.status
                print(f"{ref} {path.stem:36s} {expected:36s} -> {got}")
            _summarise(ref, rows)
    finally:
        pool.close()


def _summarise(ref: str, rows: dict[str, list[tuple[str, dict[str, Any]]]]) -> None:
    def worst(details: dict[str, Any], *keys: str) -> float:
        values = [v for key in keys for v in details.get(key, []) if v is not None]
        return max(values) if values else math.nan

    print(f"## {ref}")
    for kind in ("passed", "failed", "cheat"):
        errors = [worst(d, "grad_errors", "param_errors", "rel_errors") for _, d in rows[kind]]
        print(f"  {kind:7s} n={len(rows[kind]):2d} largest errors: {_fmt(sorted(errors))}")
    memory = [(name, d["memory"]) for kind in rows for name, d in rows[kind] if "memory" in d]
    if memory:
        first = memory[0][1]
        print(
            "  trusted peaks MiB: one at a time {:.2f}, kept graphs {:.2f}, whole window {:.2f}, "
            "limit {:.2f}".format(
                first["one_at_a_time"] / 2**20, first["kept_graphs"] / 2**20,
                first["whole_window"] / 2**20, first["limit"] / 2**20,
            )
        )  # fmt: skip
        for kind in ("passed", "failed", "cheat"):
            peaks = sorted((d["memory"]["peak"] / 2**20, n) for n, d in rows[kind] if "memory" in d)
            edge = peaks[-1] if kind == "passed" else peaks[0]  # the one nearest the limit
            print(f"  {kind:7s} learner peaks MiB: {_fmt([p for p, _ in peaks])} "
                  f"(nearest the limit: {edge[1]})")  # fmt: skip
    for kind in ("passed", "failed", "cheat"):
        witness = [w for _, d in rows[kind] for w in d.get("witness", [])]
        if witness:
            auto = [a / g for w in witness for a, g in zip(w["to_autocast"], w["gap"], strict=True)]
            f32 = [f / g for w in witness for f, g in zip(w["to_float32"], w["gap"], strict=True)]
            gaps = [g for w in witness for g in w["gap"]]
            print(
                f"  {kind:7s} witness: to low precision / gap max {max(auto):.3g}, "
                f"to float32 / gap min {min(f32):.3g} median {statistics.median(f32):.3g}, "
                f"gap {min(gaps):.2g}-{max(gaps):.2g}"
            )
        speedups = [d["speedup"] for _, d in rows[kind] if "speedup" in d]
        if speedups:
            print(f"  {kind:7s} speedups: {_fmt(sorted(speedups))}")
        ratios = [max(d["peak_ratios"]) for _, d in rows[kind] if "peak_ratios" in d]
        if ratios:
            print(f"  {kind:7s} highest peak ratio: {_fmt(sorted(ratios))}")


if __name__ == "__main__":
    main()
