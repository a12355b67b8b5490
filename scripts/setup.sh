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
# SGLang's pure-Python parts for the contract tests (tests/contract): the release the engine
# image pins (dressage.engine.sglang_support.SGLANG_PINNED_VERSION), without its GPU stack
# (--no-deps keeps the CPU torch above), plus exactly what importing `sampling_params`,
# `io_struct` and `server_args` needs (triton: imported by sglang.srt.utils).
pip_install --no-deps "sglang==0.5.2"
pip_install --no-deps "triton==3.9.0"
pip_install aiohttp requests tqdm numpy "IPython==9.18.1" "setproctitle==1.3.8" \
  "pybase64==1.5.1" "partial_json_parser==0.2.1.1.post7" "pyzmq==27.3.0" "fastapi==0.165.0" \
  "sentencepiece==0.2.3" "dill==0.4.1"
echo "$want" > "$STAMP"
