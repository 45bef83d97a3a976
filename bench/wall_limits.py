"""What each exercise's wall clock limit must cover: the learner phases' wall time of every
submission in tests/corpus (correct, wrong, cheats; the endless ones aside), through the warm
pool, on an idle machine and with every core kept busy by other processes, side by side.

The limit (`limits.wall_s` in each lesson.yaml) is what an endless loop costs a worker, and what
a learner waits for it; it must still leave an honest submission on a loaded machine far from
the edge. Usage: .venv/bin/python bench/wall_limits.py [--busy N] [--rounds R]
"""

import argparse
import multiprocessing
import os
import platform
import tempfile
from collections import defaultdict
from pathlib import Path

from gradlab.config import PROJECT_ROOT, Settings
from gradlab.content.loader import load_content
from worker.grading import grade
from worker.jobs import SandboxJob, SandboxRun
from worker.pool import WarmPool

CORPUS = PROJECT_ROOT / "tests" / "corpus"
EXERCISES = {
    starter.stem: f"{starter.parent.parent.name}/{starter.stem}"
    for starter in (PROJECT_ROOT / "lessons").glob("*/exercises/*.py")
}


def _burn(stop: "multiprocessing.synchronize.Event") -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


Walls = dict[str, list[tuple[float, str]]]


def measure(pool: WarmPool, settings: Settings, rounds: int) -> Walls:
    """exercise -> (the learner phases' wall seconds, file) of each corpus submission, every
    round."""
    content = load_content(settings.content_dir)
    walls: Walls = defaultdict(list)

    for _ in range(rounds):
        for path in sorted(CORPUS.glob("*/*.py")):
            if "endless" in path.stem:
                continue
            exercise = EXERCISES[path.parent.name]

            def runner(
                *,
                settings: Settings,
                job: SandboxJob,
                exercise: str = exercise,
                name: str = path.name,
            ) -> SandboxRun:
                run = pool.run(settings=settings, job=job)
                walls[exercise].append((sum(p.wall_s for p in run.learner_phases), name))
                return run

            grade(
                content=content,
                settings=settings,
                exercise=exercise,
                code=path.read_text(encoding="utf-8"),
                locale="en",
                runner=runner,
            )
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="busy processes")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    settings = Settings(data_dir=Path(tempfile.mkdtemp()), device="cpu", max_wall_s=120)
    content = load_content(settings.content_dir)
    pool = WarmPool(settings, slots=1, use_gpu=False)
    try:
        measure(pool, settings, 1)  # warm-up: the trusted phases' caches
        idle = measure(pool, settings, args.rounds)
        stop = multiprocessing.Event()
        burners = [multiprocessing.Process(target=_burn, args=(stop,)) for _ in range(args.busy)]
        for burner in burners:
            burner.start()
        try:
            busy = measure(pool, settings, args.rounds)
        finally:
            stop.set()
            for burner in burners:
                burner.join()
    finally:
        pool.close()
    print(
        f"{platform.node()} {platform.python_version()} cores={os.cpu_count()} "
        f"busy={args.busy} rounds={args.rounds}"
    )
    header = f"{'exercise':42} {'n':>4} {'idle max s':>10} {'busy max s':>10} {'busy/idle':>9}"
    print(header + f" {'limit s':>8} {'limit/busy max':>14}  slowest (busy)")
    for exercise in sorted(idle):
        limit = content.exercises[exercise].spec.limits.wall_s
        (idle_max, _), (busy_max, slowest) = max(idle[exercise]), max(busy[exercise])
        print(
            f"{exercise:42} {len(idle[exercise]):4} {idle_max:10.2f} {busy_max:10.2f} "
            f"{busy_max / idle_max:9.1f} {limit:8.0f} {limit / busy_max:14.1f}  {slowest}"
        )


if __name__ == "__main__":
    main()
