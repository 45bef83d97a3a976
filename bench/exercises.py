"""Every exercise's reference solution through the warm pool, side by side in one run.

Per exercise: p50/p95 of the whole grade (sandboxed run + trusted judgement) and the ratio to
the gradient-accumulation job, the fastest and oldest one. Jobs of different exercises are
interleaved, so machine noise hits them alike.
Usage: .venv/bin/python bench/exercises.py [--rounds 10] [--device cpu|cuda]
"""

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import load_content
from worker.grading import grade
from worker.pool import WarmPool

CORPUS = PROJECT_ROOT / "tests" / "corpus"
REFERENCES = {
    "gradient-accumulation/accumulate": CORPUS / "accumulate" / "canonical.py",
    "mixed-precision/amp-step": CORPUS / "amp-step" / "reference.py",
    "profiling/find-the-bottleneck": CORPUS / "find-the-bottleneck" / "reference.py",
    "gpu-memory/fit-the-budget": CORPUS / "fit-the-budget" / "reference.py",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    settings = Settings(data_dir=Path(tempfile.mkdtemp()), device=args.device)
    content = load_content(settings.content_dir)
    pool = WarmPool(settings, slots=1, use_gpu=args.device == "cuda")
    times: dict[str, list[float]] = {exercise: [] for exercise in REFERENCES}
    try:
        for round_ in range(args.rounds + 1):
            for exercise, path in REFERENCES.items():
                started = time.monotonic()
                result = grade(
                    content=content,
                    settings=settings,
                    exercise=exercise,
                    code=path.read_text(encoding="utf-8"),
                    locale="en",
                    runner=pool.run,
                )
                elapsed = time.monotonic() - started
                if result.status != "passed":
                    raise SystemExit(f"{exercise}: reference did not pass: {result}")
                if round_ > 0:  # round 0 fills the trusted side's caches
                    times[exercise].append(elapsed)
    finally:
        pool.close()
    print(
        f"{platform.node()} {platform.python_version()} device={args.device} rounds={args.rounds}"
    )
    base = statistics.median(times["gradient-accumulation/accumulate"])
    print(f"{'exercise':34} {'p50 s':>7} {'p95 s':>7} {'p50 / accumulate':>17}")
    for exercise, samples in times.items():
        p50 = statistics.median(samples)
        p95 = statistics.quantiles(samples, n=20)[-1] if len(samples) > 1 else samples[0]
        print(f"{exercise:34} {p50:7.3f} {p95:7.3f} {p50 / base:17.2f}")


if __name__ == "__main__":
    main()
