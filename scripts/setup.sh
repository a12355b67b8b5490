#!/usr/bin/env bash
# Create .venv and install Dressage with every extra the local run and the tests need, then
# one contract-tier environment per SGLang release of the matrix
# (dressage.api.sglang.SGLANG_TESTED_RELEASES), each in .sglang/<release>/
# (scripts/sglang-env.sh).
# Idempotent: with an unchanged pyproject.toml and unchanged release lists it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.dressage-setup-stamp
want=$(cat pyproject.toml testkit/pyproject.toml scripts/setup.sh scripts/pip.sh | sha256sum | cut -d' ' -f1)
# shellcheck source=scripts/pip.sh
. scripts/pip.sh

if ! { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; }; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  # The CPU build of torch: laptops and CI have no GPU. Images install the CUDA build instead.
  pip_install "torch==2.13.0"
  pip_install -e ".[train,operator,tracking,dev]"
  # The test support (testkit/: launchers, the fork server, the Kubernetes API emulation), a
  # package of its own so the product wheel never contains it.
  pip_install -e ./testkit
  # No SGLang in the main venv: nothing outside tests/contract may import it (the import
  # contract in pyproject.toml), and each release of the matrix lives in its own directory.
  # A venv made before the matrix had one installed here; it goes.
  if "$VENV/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("sglang") is None)'
  then
    "$VENV/bin/pip" uninstall --yes --quiet sglang
  fi
  # What every release's `sampling_params`, `io_struct` and `server_args` import besides
  # SGLang itself and the release's own extras (tests/contract/releases/<release>.txt), kept
  # here once instead of once per release: triton alone is 1 GB (imported by
  # sglang.srt.utils); --no-deps keeps the CPU torch above.
  pip_install --no-deps "triton==3.9.0"
  pip_install aiohttp requests tqdm numpy "IPython==9.18.1" "pybase64==1.5.1" \
    "partial_json_parser==0.2.1.1.post7" "pyzmq==27.3.0" "fastapi==0.165.0" \
    "sentencepiece==0.2.3" "dill==0.4.1"
  echo "$want" > "$STAMP"
fi

read -r -a releases <<< "$("$VENV/bin/python" -c \
  'from dressage.api.sglang import SGLANG_TESTED_RELEASES as r; print(*r)')"
for release in "${releases[@]}"; do
  bash scripts/sglang-env.sh "$release" > /dev/null
done
