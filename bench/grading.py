"""Cold path vs warm pool, side by side in one run: latency (p50/p95) and throughput.

Cold: a fresh bubblewrap sandbox + interpreter + `import torch` per job. Warm: per slot, a
sandboxed zygote that has imported torch forks one child per job. Same exercise, same code.
Usage: .venv/bin/python bench/grading.py [--jobs 20] [--slots 1 2] [--device cpu|cuda]
Prints ratios; absolute numbers depend on the machine and its load.
"""

import argparse
import json
import platform
import statistics
import threading
import time
from pathlib import Path

from gradlab.config import Settings
from gradlab.content.loader import load_content
from worker.grading import Runner, grade
from worker.pool import WarmPool, run_in_sandbox

CODE = (Path(__file__).resolve().parent.parent / "tests/corpus/accumulate/canonical.py").read_text()
EXERCISE = "gradient-accumulation/accumulate"


def measure(runner: Runner, settings: Settings, jobs: int, concurrency: int) -> dict[str, float]:
    content = load_content(settings.content_dir)
    latencies: list[float] = []
    lock = threading.Lock()
    todo = list(range(jobs))

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            started = time.monotonic()
            result = grade(
                content=content,
                settings=settings,
                exercise=EXERCISE,
                code=CODE,
                locale="en",
                runner=runner,
            )
            assert result.status == "passed", result.model_dump_json()
            with lock:
                latencies.append(time.monotonic() - started)

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    latencies.sort()
    return {
        "p50_s": statistics.median(latencies),
        "p95_s": latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))],
        "throughput_per_s": jobs / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    settings = Settings(device=args.device)
    use_gpu = args.device == "cuda"
    print(
        f"# bench/grading.py {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()}, "
        f"device={args.device}, {args.jobs} jobs per row"
    )
    rows = {}
    cold_jobs = max(4, args.jobs // 4)  # cold jobs are slow; fewer of them
    rows["cold x1"] = measure(run_in_sandbox, settings, cold_jobs, 1)
    for slots in args.slots:
        pool = WarmPool(settings, slots=slots, use_gpu=use_gpu)
        measure(pool.run, settings, slots, slots)  # first job per slot warms the trusted side
        rows[f"warm x{slots}"] = measure(pool.run, settings, args.jobs, slots)
        pool.close()
    cold = rows["cold x1"]
    print(f"{'mode':10s} {'p50 s':>8s} {'p95 s':>8s} {'grades/s':>9s} {'p50 vs cold':>12s}")
    for name, row in rows.items():
        print(
            f"{name:10s} {row['p50_s']:8.3f} {row['p95_s']:8.3f} {row['throughput_per_s']:9.2f} "
            f"{row['p50_s'] / cold['p50_s']:12.3f}"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
