#!/usr/bin/env bash
# Set up and run the main job locally: an RL run on CPU with the embedded engine.
# The environment is .venv-run (scripts/setup-run.sh): the CPU build of torch and Dressage's
# `train` extra only, not the tests' world of scripts/setup.sh.
# Extra arguments go to `dressage run` (e.g. `--steps 5`).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-run.sh
exec .venv-run/bin/dressage run examples/local-tiny.yaml "$@"
