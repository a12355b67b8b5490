#!/usr/bin/env bash
# Run the contract tier (tests/contract) against one SGLang release and summarize it.
#
#   bash scripts/sglang-compat.sh VERSION [--with PKG==V ...] [-- PYTEST_ARGS...]
#
# Makes (or reuses) the release's environment (scripts/sglang-env.sh: .sglang/VERSION, from
# tests/contract/releases/VERSION.txt, or for a release not in the matrix the newest tested
# release's extras plus any --with), runs the tier against it in a subprocess of its own and
# prints what failed, test by test. Exit status: the tier's (0 when every test passed).
# scripts/test.sh runs it for every release of the matrix; moving the matrix to a new release
# is this command plus the fixes it shows (docs/cluster.md, "Supported SGLang releases").
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bash scripts/sglang-compat.sh VERSION [--with PKG==V ...] [-- PYTEST_ARGS...]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
version=$1
shift
with=()
while [ $# -gt 0 ]; do
  case $1 in
    --with) [ $# -ge 2 ] || usage; with+=(--with "$2"); shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done

bash scripts/setup.sh
dir=$(bash scripts/sglang-env.sh "$version" "${with[@]}" | tail -n 1)
report=$(mktemp --suffix .xml)
trap 'rm -f "$report"' EXIT

echo "== contract tier: SGLang $version ($dir)"
status=0
# The tier's conftest refuses to run unless this exact release is the one importable
# (DRESSAGE_SGLANG_RELEASE): an environment that failed to load never passes as skipped tests.
DRESSAGE_SGLANG_RELEASE=$version PYTHONPATH=$dir \
  .venv/bin/python -m pytest tests/contract -p no:cacheprovider --junitxml="$report" "$@" \
  || status=$?
.venv/bin/python scripts/sglang_compat_summary.py "$report" "$version" "$status"
exit "$status"
