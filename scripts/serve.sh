#!/usr/bin/env bash
# Set up (idempotent) and run gradlab on the embedded default: SQLite under ./data, one local
# worker, http://127.0.0.1:8000. Extra arguments go to `gradlab serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/gradlab serve "$@"
