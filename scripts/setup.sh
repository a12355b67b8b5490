#!/usr/bin/env bash
# Create .venv and install Dressage with every extra the local run and the tests need.
# Idempotent: a second call with an unchanged pyproject.toml does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.dressage-setup-stamp
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# The CPU build of torch: laptops and CI have no GPU. Images install the CUDA build instead.
pip_install() {
  # The machine's pip config lists local mirrors that may not exist; their warnings are noise.
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "^WARNING: Location .* is ignored" || true; }
  return "${PIPESTATUS[0]}"
}
pip_install "torch==2.13.0"
pip_install -e ".[train,operator,dev]"
echo "$want" > "$STAMP"
