#!/usr/bin/env bash
# Make, or reuse, the contract tier's environment for one SGLang release and print its path.
#
#   bash scripts/sglang-env.sh VERSION [--with PKG==V ...]
#
# The environment is `.sglang/VERSION/`: `pip install --no-deps --target` of the release and
# the few extras its `sampling_params`, `io_struct` and `server_args` import, listed in
# tests/contract/releases/VERSION.txt. It is used on top of the main venv (.venv, made by
# scripts/setup.sh: the CPU torch and the extras every release imports) with
# PYTHONPATH=.sglang/VERSION, so releases never share a site-packages and the main venv holds
# no SGLang at all. A release without a list (one being tried, scripts/sglang-compat.sh) gets
# the newest tested release's extras, then what scripts/sglang_env_needs.py finds it still
# needs, round by round: the release's pins of packages the main venv holds at versions it
# rejects (its transformers, then the tokenizers and huggingface-hub that transformers takes,
# its kernels), and the packages the tier's imports miss (xgrammar); each lands in
# .sglang/VERSION, where it hides the main venv's. `--with` adds requirements to either.
# Idempotent: a stamp holds the hash of what was installed, and an unchanged list does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bash scripts/sglang-env.sh VERSION [--with PKG==V ...]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
version=$1
shift
if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+([.a-z0-9]*)$ ]]; then
  echo "sglang-env.sh: not an SGLang release version: '$version' (e.g. 0.5.23)" >&2
  exit 2
fi
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --with) [ $# -ge 2 ] || usage; extra+=("$2"); shift 2 ;;
    *) usage ;;
  esac
done

VENV=.venv
[ -x "$VENV/bin/python" ] || { echo "sglang-env.sh: no $VENV: run scripts/setup.sh" >&2; exit 1; }
# shellcheck source=scripts/pip.sh
. scripts/pip.sh

requirements() {  # the lines of a list, without comments
  sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e 's/^[[:space:]]*//' "$1" | grep -v '^$' || true
}

list=tests/contract/releases/$version.txt
if [ -f "$list" ]; then
  mapfile -t reqs < <(requirements "$list")
else
  newest=$("$VENV/bin/python" -c \
    'from dressage.api.sglang import SGLANG_NEWEST_TESTED as v; print(v)')
  echo "sglang-env.sh: no $list; using the extras of $newest, the newest tested release" >&2
  mapfile -t reqs < <(requirements "tests/contract/releases/$newest.txt" | grep -v '^sglang==')
  reqs=("sglang==$version" "${reqs[@]}")
fi
reqs+=("${extra[@]}")

dir=.sglang/$version
stamp=$dir/.dressage-stamp
stamped=("${reqs[@]}" "$("$VENV/bin/python" -V)")
# A release without a list is also what the resolver found: a changed resolver remakes it.
[ -f "$list" ] || stamped+=("$(sha256sum scripts/sglang_env_needs.py)")
want=$(printf '%s\n' "${stamped[@]}" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$dir"
  exit 0
fi

echo "sglang-env.sh: installing into $dir: ${reqs[*]}" >&2
# Into a fresh directory, moved in place only once complete: a failed install leaves no
# half-made environment behind a stale stamp.
rm -rf "$dir.partial"
mkdir -p .sglang
pip_install --no-deps --target "$dir.partial" "${reqs[@]}" >&2
if [ ! -f "$list" ]; then
  for _ in $(seq 12); do
    mapfile -t needs < <("$VENV/bin/python" scripts/sglang_env_needs.py "$dir.partial")
    [ ${#needs[@]} -gt 0 ] || break
    echo "sglang-env.sh: $version also needs: ${needs[*]}" >&2
    pip_install --no-deps --upgrade --target "$dir.partial" "${needs[@]}" >&2
  done
fi
echo "$want" > "$dir.partial/.dressage-stamp"
rm -rf "$dir"
mv "$dir.partial" "$dir"
echo "$dir"
