#!/usr/bin/env bash
# The whole test suite from a fresh machine: set up, lint, type-check, test.
# pytest runs the suite once without the contract tier (in $DRESSAGE_TEST_WORKERS parallel
# processes when set, pytest-xdist, one test file per process at a time; default 0: in one
# process, since the cluster-shaped operator tests are timing-sensitive when two run beside
# each other on two cores), then the contract tier once per SGLang
# release of the matrix (dressage.api.sglang.SGLANG_TESTED_RELEASES), each in a subprocess
# with that release's environment (scripts/sglang-compat.sh). Every run goes ahead even when
# an earlier one failed; the script fails when any of them did.
# Extra arguments are pytest options for every run (e.g. `bash scripts/test.sh -m "not slow"`).
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

failed=()
echo "== pytest (all but the contract tier)"
python -m pytest --ignore=tests/contract -n "${DRESSAGE_TEST_WORKERS:-0}" --dist loadfile "$@" \
  || failed+=("the suite")
read -r -a releases <<< "$(python -c \
  'from dressage.api.sglang import SGLANG_TESTED_RELEASES as r; print(*r)')"
for release in "${releases[@]}"; do
  bash scripts/sglang-compat.sh "$release" -- -q "$@" || failed+=("the contract tier on SGLang $release")
done

if [ ${#failed[@]} -gt 0 ]; then
  printf '== FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "== passed: the suite, and the contract tier on SGLang ${releases[*]}"
