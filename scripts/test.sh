#!/usr/bin/env bash
# Set up (idempotent) and run the test suite. Extra arguments go to pytest
# (e.g. `scripts/test.sh -m gpu` on a machine with a CUDA GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
