#!/usr/bin/env bash
# Set up and run the main job locally: an RL run on CPU with the embedded engine.
# Extra arguments go to `dressage run` (e.g. `--steps 5`).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
exec .venv/bin/dressage run examples/local-tiny.yaml "$@"
