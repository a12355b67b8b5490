#!/usr/bin/env bash
# The whole test suite from a fresh machine: set up, lint, type-check, test.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not slow"`).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/install-tools.sh
export PATH="$PWD/.tools/bin:$PWD/.venv/bin:$PATH"

echo "== ruff"
ruff check .
echo "== mypy"
mypy
echo "== import contract (pyproject.toml [tool.importlinter])"
lint-imports --no-cache
echo "== pytest"
python -m pytest "$@"
