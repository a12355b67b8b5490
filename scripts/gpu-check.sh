#!/usr/bin/env bash
# The GPU check, for a machine with one NVIDIA GPU and no network (benchmarks/gpu_check.py):
# the trainer steps on CUDA with the real loss, the embedded engine serves on CUDA, a short
# `dressage run --device cuda` completes, and FSDP2 bf16 trains a ~0.5 B-parameter Llama on one
# GPU. Prints step time, tokens/s and peak GPU memory per part and a one-line verdict; exits
# non-zero when a part fails. About 2-4 minutes on a current GPU; every part is bounded.
#
#   bash scripts/gpu-check.sh [--device cuda:1] [--parts trainer,fsdp] [--json out.json]
#
# Python: $PYTHON if set, else .venv/bin/python when its torch sees CUDA, else python3. Nothing
# is installed from the network: the project runs from this checkout (PYTHONPATH). Modules the
# chosen Python lacks are installed only from a local wheel directory named by
# $DRESSAGE_WHEELS (into .venv-gpu, a venv layered on the system site-packages); without one,
# the script names them and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_NO_INDEX=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

sees_cuda() { "$1" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in .venv-gpu/bin/python .venv/bin/python python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && sees_cuda "$cand"; then PY=$cand; break; fi
  done
fi
if [ -z "$PY" ]; then
  echo "gpu-check: FAIL: no Python here has a torch that sees a CUDA device (set PYTHON=...)"
  exit 2
fi

# import name -> distribution name, for everything the four parts import.
MODULES="torch:torch transformers:transformers safetensors:safetensors tokenizers:tokenizers
pydantic:pydantic yaml:pyyaml httpx:httpx uvicorn:uvicorn orjson:orjson httptools:httptools
jinja2:jinja2 prometheus_client:prometheus-client typing_extensions:typing-extensions
matplotlib:matplotlib numpy:numpy"
missing() {
  local out=""
  for pair in $MODULES; do
    "$1" -c "import ${pair%%:*}" 2>/dev/null || out="$out ${pair#*:}"
  done
  echo "$out"
}
need=$(missing "$PY")
if [ -n "$need" ]; then
  if [ -n "${DRESSAGE_WHEELS:-}" ] && [ -d "$DRESSAGE_WHEELS" ]; then
    [ -x .venv-gpu/bin/python ] || "$PY" -m venv --system-site-packages .venv-gpu
    # shellcheck disable=SC2086  # one argument per distribution
    .venv-gpu/bin/pip install --quiet --no-index --find-links "$DRESSAGE_WHEELS" $need
    PY=.venv-gpu/bin/python
    need=$(missing "$PY")
  fi
  if [ -n "$need" ]; then
    echo "gpu-check: FAIL: $PY lacks:$need (no network here: point DRESSAGE_WHEELS at wheels)"
    exit 2
  fi
fi

echo "gpu-check: python $PY"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
# 8 minutes at most, whatever happens.
exec timeout --kill-after=20 480 "$PY" benchmarks/gpu_check.py --device cuda "$@"
