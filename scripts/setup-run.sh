#!/usr/bin/env bash
# Create .venv-run with what `dressage run` needs and nothing else: the CPU build of torch and
# Dressage with its `train` extra (no test tools, no triton, no SGLang contract environments,
# which scripts/setup.sh installs into .venv for the tests). Prints the environment's size.
# Idempotent: with an unchanged pyproject.toml and unchanged scripts it installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv-run
STAMP=$VENV/.dressage-setup-stamp
want=$(cat pyproject.toml scripts/setup-run.sh scripts/pip.sh | sha256sum | cut -d' ' -f1)
# shellcheck source=scripts/pip.sh
. scripts/pip.sh

if ! { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; }; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  # The CPU build first (the same pin as scripts/setup.sh): an unpinned torch resolves to a
  # multi-GB CUDA build. A GPU machine installs the CUDA build instead (docs/install.md).
  pip_install "torch==2.13.0"
  pip_install -e ".[train]"
  echo "$want" > "$STAMP"
  echo "installed the local run's environment: $(du -sh "$VENV" | cut -f1) in $VENV" >&2
fi
