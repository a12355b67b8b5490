#!/usr/bin/env bash
# Regenerate crds/ from the job model (dressage/api). Pass --check to only compare.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m dressage_operator.crdgen "$@"
