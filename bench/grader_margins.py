"""How far apart correct and wrong loops land, measured through the real sandbox.

For every corpus submission that runs, prints the largest relative gradient and parameter error
over its scenarios, then per exercise the margin: (smallest error of a wrong loop) / (largest
error of a correct loop), and the tolerance's place between them. Also the grading time per
submission (cold sandbox). Usage: .venv/bin/python bench/grader_margins.py [--device cuda]
"""

import argparse
import json
import math
import platform
import statistics
import time
from pathlib import Path

from worker.graders.gradient_accumulation import TOLERANCE

from gradlab.config import Settings
from gradlab.content.loader import load_content
from worker.graders import get_grader
from worker.observations import parse
from worker.sandbox import run_in_sandbox

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    settings = Settings(max_wall_s=30)
    content = load_content(settings.content_dir)
    print(
        f"# grader margins, {time.strftime('%Y-%m-%d')}, {platform.node()}, "
        f"device={args.device}, tolerance={TOLERANCE[args.device]:g}"
    )
    summary = {}
    for folder in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        exercise = content.exercises[f"gradient-accumulation/{folder.name}"]
        grader = get_grader(exercise.spec.grader)
        spec = {
            "exercise": exercise.ref,
            "harness": grader.harness,
            "device": args.device,
            "scenarios": grader.scenarios(),
        }
        correct, wrong, seconds = [], [], []
        for path in sorted(folder.glob("*.py")):
            header = path.read_text().splitlines()[0]
            if "error" in header.split()[2:3]:
                continue
            started = time.monotonic()
            run = run_in_sandbox(
                settings=settings,
                spec_json=json.dumps(spec),
                code=path.read_text(),
                wall_s=30,
                memory_mb=4096,
                use_gpu=args.device == "cuda",
            )
            obs = parse(run.observations.data)
            judgement = grader.judge(obs, exercise=exercise.ref, locale="en", content=content)
            seconds.append(time.monotonic() - started)
            worst = max(*judgement.details["grad_errors"], *judgement.details["param_errors"])
            if "passed" in header:
                correct.append(worst)
            elif "microbatches_not_used" not in header:  # right numbers, wrong method
                wrong.append(worst)
            print(f"{folder.name}/{path.stem:32s} {header[9:]:40s} worst error {worst:.3g}")
        smallest_wrong = min((e for e in wrong if math.isfinite(e)), default=math.inf)
        summary[folder.name] = {
            "largest_correct_error": max(correct),
            "smallest_wrong_error": smallest_wrong,
            "margin": smallest_wrong / max(max(correct), 1e-300),
            "grade_s_p50": statistics.median(seconds),
        }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
