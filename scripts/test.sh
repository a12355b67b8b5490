#!/usr/bin/env bash
# The whole test suite from a fresh machine: set up, lint, type-check, test.
# pytest runs the suite once without the contract tier, then the contract tier once per SGLang
# release of the matrix (dressage.api.sglang.SGLANG_TESTED_RELEASES), each in a subprocess with
# that release's environment (scripts/sglang-compat.sh). The suite uses $DRESSAGE_TEST_WORKERS
# processes (pytest-xdist, default 3; 0 runs in one process) with `--dist loadfile`: a test
# file per process at a time, except the cluster-shaped operator files, which share one group
# (tests/conftest.py, SERIAL_FILES) so that two of them never run side by side. Three processes
# on two cores: the third takes the CPU the other two leave idle while their runs start, wait
# for each other and stop (CONTRIBUTING.md, "The suite's time"). The releases'
# contract tiers run side by side, one process each (their output printed one after the
# other): each spends much of its time waiting, and one process per release imports SGLang
# once instead of once per worker. The images tier (tests/images: the images built with podman
# and run) runs beside them in a process of its own. Every run goes ahead even when an earlier
# one failed; the script fails when any of them did.
# Extra arguments are pytest options for every run (e.g. `bash scripts/test.sh -m "not slow"`).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase's wall time, printed as it ends, so a slow machine or a slow phase shows at once.
phase_start=$SECONDS
took() { echo "== took $((SECONDS - phase_start)) s: $1"; phase_start=$SECONDS; }

bash scripts/setup.sh
bash scripts/install-tools.sh
export PATH="$PWD/.tools/bin:$PWD/.venv/bin:$PATH"
# The suite starts hundreds of Python processes from this checkout (runs, engines, proxies,
# trainers) and every xdist worker imports every test module: with PYTHONDONTWRITEBYTECODE set
# (container images often set it) each of them would compile the project's modules, and pytest
# rewrite the tests' asserts, from source again. The bytecode goes to __pycache__ (ignored by git
# and by the images' build context).
unset PYTHONDONTWRITEBYTECODE
took "setup and tools"

# The images tier's images (the stand-in bases first, on a machine that has none: the longest
# part of a first run) build in the background from here on, at the lowest CPU and I/O priority,
# so they take mostly the time the suite's processes leave idle instead of running after them:
# `nice` for the build's own processes, and the least CPU weight for its RUN steps, which podman
# runs in a cgroup of their own that `nice` does not reach (scripts/container-engine.sh). The
# images tier waits for this build (a file lock: tests/images/support.py) and finds them built;
# when it failed, the tier builds again and reports it.
logs=$(mktemp -d)
prebuild_pid=""
trap 'rm -rf "$logs"; [ -z "$prebuild_pid" ] || kill "$prebuild_pid" 2>/dev/null || true' EXIT
low_priority=(nice -n 19)
! command -v ionice > /dev/null || low_priority+=(ionice -c 3)
DRESSAGE_BUILD_CPU_SHARES=2 "${low_priority[@]}" python -m tests.images.support \
  > "$logs/prebuild.log" 2>&1 &
prebuild_pid=$!

echo "== ruff"
ruff check .
echo "== mypy"
mypy
echo "== import contract (pyproject.toml [tool.importlinter])"
lint-imports --no-cache
took "ruff, mypy and the import contract"

failed=()
echo "== pytest (all but the contract tier)"
workers=(-n "${DRESSAGE_TEST_WORKERS:-3}" --dist loadfile)
python -m pytest --ignore=tests/contract --ignore=tests/images "${workers[@]}" "$@" \
  || failed+=("the suite")
took "pytest (all but the contract and images tiers)"
read -r -a releases <<< "$(python -c \
  'from dressage.api.sglang import SGLANG_TESTED_RELEASES as r; print(*r)')"
# The images tier beside them, in a process of its own: with the images built before, it is
# mostly podman starting containers. Without podman it skips (fails on CI: tests/images/support.py).
python -m pytest tests/images -p no:cacheprovider "$@" > "$logs/images.log" 2>&1 &
images_pid=$!
pids=()
for release in "${releases[@]}"; do
  bash scripts/sglang-compat.sh "$release" -- -q "$@" > "$logs/$release.log" 2>&1 &
  pids+=("$!")
done
for i in "${!releases[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  cat "$logs/${releases[$i]}.log"
  [ "$status" -eq 0 ] || failed+=("the contract tier on SGLang ${releases[$i]}")
done
echo "== pytest tests/images (the images tier)"
wait "$prebuild_pid" || true
prebuild_pid=""
cat "$logs/prebuild.log"
status=0
wait "$images_pid" || status=$?
cat "$logs/images.log"
[ "$status" -eq 0 ] || failed+=("the images tier")
took "the contract tiers and the images tier, side by side"
echo "== the whole test command took $SECONDS s"

if [ ${#failed[@]} -gt 0 ]; then
  printf '== FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "== passed: the suite, the contract tier on SGLang ${releases[*]}, and the images tier"
