#!/usr/bin/env bash
# Copy the generated CRDs (crds/*.yaml) into the Helm chart's crds/ directory, removing chart
# CRDs that no longer exist in crds/. tests/chart/test_crds_in_step.py fails until this is run
# after a change to the job model's CRD.
set -euo pipefail
cd "$(dirname "$0")/.."
src=crds
dst=charts/dressage-operator/crds
mkdir -p "$dst"
shopt -s nullglob
for stale in "$dst"/*.yaml; do
  [ -e "$src/$(basename "$stale")" ] || { rm -f "$stale"; echo "removed $stale"; }
done
for crd in "$src"/*.yaml; do
  cp "$crd" "$dst/"
  echo "copied $crd -> $dst/"
done
