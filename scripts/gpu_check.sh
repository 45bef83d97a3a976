#!/usr/bin/env bash
# The GPU checks, as one run on a machine with a CUDA GPU but no network (the device machine):
# the corpus through the CUDA path, the NVML watchdog, and the CUDA benchmarks.
# Prepare the carried files first (docs/gpu-check.md); run from the repository root.
set -uo pipefail
out="${OUT:-/tmp/gpu-check}"
mkdir -p "$out" /tmp/deb
for deb in .deb/*.deb; do dpkg -x "$deb" /tmp/deb; done
export PATH="/tmp/deb/usr/bin:$PATH"
export LD_LIBRARY_PATH="/tmp/deb/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 GRADLAB_BWRAP_PATH=/tmp/deb/usr/bin/bwrap
nvidia-smi -L | tee "$out/gpu.txt"
python3 - <<'PY' | tee "$out/env.txt"
import sys, torch
print(sys.version, "torch", torch.__version__, "cuda", torch.cuda.is_available())
PY
python3 -m pytest -m gpu -p no:cacheprovider -o addopts="" -ra \
  tests/test_grader*.py tests/test_gpu_watchdog.py 2>&1 | tee "$out/pytest-gpu.txt"
python3 bench/grading.py --device cuda --slots 1 2 4 --jobs 30 2>&1 | tee "$out/bench-grading.txt"
python3 bench/grader_margins.py --device cuda 2>&1 | tee "$out/bench-margins.txt"
python3 bench/exercises.py --device cuda --rounds 10 2>&1 | tee "$out/bench-exercises.txt"
