#!/usr/bin/env bash
# Build, or reuse, the local stand-ins for the images' real bases, for machines that cannot pull
# from a registry (the tests build and run the images on them: tests/images).
#
#   bash scripts/build-stand-in-bases.sh [--release SGLANG_RELEASE ... | --no-sglang]
#
# Three bases, each tagged under localhost/ and printed as `KIND=REFERENCE` lines (KIND python,
# torch or sglang-<release>), the --build-arg values of scripts/build-images.sh:
#   localhost/dressage-stand-in-python:3.11-bookworm   python:3.11-slim-bookworm's stand-in:
#       Debian bookworm made by debootstrap with Debian's Python 3.11, pip and CA certificates,
#       not marked externally managed (pip installs into it as into python:slim).
#   localhost/dressage-stand-in-torch:2.13.0-cpu   pytorch/pytorch's stand-in: that base plus
#       the CPU build of the torch release scripts/setup.sh pins (the wheel pip takes from this
#       machine's disk).
#   localhost/dressage-stand-in-sglang:<release>   lmsysorg/sglang's stand-in, one per tested
#       release (dressage.api.sglang.SGLANG_TESTED_RELEASES unless --release): the torch base
#       plus the release's Python package as the contract tier installs it (.sglang/<release>,
#       scripts/sglang-env.sh) and the modules importing its server_args and launch_server
#       needs, at the versions the contract tier runs (.venv). It parses SGLang's command line;
#       it serves nothing (no GPU, no kernels).
# A base is rebuilt only when its recipe changed: each carries the hash of its inputs (this
# script's recipe for it, the base below it, the files it copies) in the label
# io.dressage.stand-in.recipe; a second run on the same machine builds none. Needs a container
# engine (scripts/container-engine.sh: the tests pick podman with DRESSAGE_CONTAINER_ENGINE) and,
# for the Debian base, debootstrap, as root; .venv and .sglang from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/container-engine.sh
. scripts/container-engine.sh

releases=()
sglang=true
while [ $# -gt 0 ]; do
  case $1 in
    --release) [ $# -ge 2 ] || { echo "--release needs a value" >&2; exit 2; }; releases+=("$2"); shift 2 ;;
    --no-sglang) sglang=false; shift ;;
    *) echo "usage: bash scripts/build-stand-in-bases.sh [--release SGLANG_RELEASE ... | --no-sglang]" >&2; exit 2 ;;
  esac
done
VENV=.venv
[ -x "$VENV/bin/python" ] || { echo "build-stand-in-bases.sh: no $VENV: run scripts/setup.sh" >&2; exit 1; }
if $sglang && [ ${#releases[@]} -eq 0 ]; then
  read -r -a releases <<< "$("$VENV/bin/python" -c \
    'from dressage.api.sglang import SGLANG_TESTED_RELEASES as r; print(*r)')"
fi
TORCH_VERSION=$(sed -n 's/.*"torch==\([0-9.]*\)".*/\1/p' scripts/setup.sh | head -n 1)
LABEL=io.dressage.stand-in.recipe
PYTHON_BASE=localhost/dressage-stand-in-python:3.11-bookworm
TORCH_BASE=localhost/dressage-stand-in-torch:$TORCH_VERSION-cpu
SGLANG_BASE=localhost/dressage-stand-in-sglang

current_recipe() {  # the recipe hash an image carries, empty when there is no such image
  local found
  if found=$(container_engine image inspect --format "{{ index .Labels \"$LABEL\" }}" "$1" 2>&1); then
    echo "$found"
  elif [[ $found != *"image not known"* && $found != *"No such image"* ]]; then
    # Any other failure (a store busy with another build, say) stops here instead of taking
    # the base for absent and rebuilding it and every base above it.
    echo "build-stand-in-bases: cannot read $1's recipe: $found" >&2
    return 1
  fi
}
image_id() { container_engine image inspect --format '{{.Id}}' "$1"; }

python_base() {  # $1: the recipe hash to label it with
  local root
  root=$(mktemp -d /var/tmp/dressage-stand-in.XXXXXX)
  scratch+=("$root")
  debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
    bookworm "$root" http://deb.debian.org/debian >&2
  rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
  # This machine's trusted certificates: pip in the images' builds reaches the package index
  # through whatever this machine trusts.
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -c . \
    | container_engine import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["python3"]' \
        --change "LABEL $LABEL=$1" - "$PYTHON_BASE" >&2
  rm -rf "$root"
}

torch_base() {  # $1: the recipe hash; $2: the build context holding the torch wheel
  # --no-cache: the wheel is bind-mounted, not copied (it would stay in a layer), so the layer
  # cache cannot see it change; this runs only when the recipe's hash did.
  container_engine build --no-cache --network host --file images/stand-in/torch.Dockerfile \
    --build-arg "PYTHON_IMAGE=$PYTHON_BASE" --label "$LABEL=$1" --tag "$TORCH_BASE" "$2" >&2
}

sglang_base() {  # $1: the recipe hash; $2: the release; $3: the build context
  container_engine build --network host --file images/stand-in/sglang.Dockerfile \
    --build-arg "TORCH_IMAGE=$TORCH_BASE" --label "$LABEL=$1" --tag "$SGLANG_BASE:$2" "$3" >&2
}

# The distributions besides torch and SGLang that `sglang.srt.server_args` and
# `sglang.launch_server` import, pinned to the versions the contract tier runs.
SGLANG_IMPORTS=(triton transformers tokenizers safetensors huggingface_hub numpy psutil pillow
  aiohttp requests tqdm ipython pybase64 partial_json_parser pyzmq fastapi uvicorn uvloop
  sentencepiece dill setproctitle orjson pydantic pyyaml regex packaging filelock sympy
  openai msgspec)
sglang_pins() {
  "$VENV/bin/python" - "${SGLANG_IMPORTS[@]}" <<'PY'
import sys
from importlib import metadata

for name in sys.argv[1:]:
    try:
        print(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        print(name)
PY
}

hash_of() { sha256sum | cut -c1-16; }
scratch=()  # directories removed on exit, whatever the exit
trap 'rm -rf "${scratch[@]}"' EXIT

want=$({ declare -f python_base; cat /etc/ssl/certs/ca-certificates.crt; } | hash_of)
have=$(current_recipe "$PYTHON_BASE")
if [ "$have" != "$want" ]; then
  echo "build-stand-in-bases: building $PYTHON_BASE (debootstrap)" >&2
  python_base "$want"
fi
echo "python=$PYTHON_BASE"

context=$(mktemp -d /var/tmp/dressage-stand-in-context.XXXXXX)
scratch+=("$context")
wheel_dir=$context/torch
"$VENV/bin/pip" download --quiet --no-deps --disable-pip-version-check --dest "$wheel_dir" \
  "torch==$TORCH_VERSION" 2>&1 | { grep -v "^WARNING: Location .* is ignored" || true; }
want=$({ declare -f torch_base; cat images/stand-in/torch.Dockerfile; image_id "$PYTHON_BASE"
  ls "$wheel_dir"; } | hash_of)
have=$(current_recipe "$TORCH_BASE")
if [ "$have" != "$want" ]; then
  echo "build-stand-in-bases: building $TORCH_BASE" >&2
  torch_base "$want" "$wheel_dir"
fi
echo "torch=$TORCH_BASE"

for release in "${releases[@]}"; do
  env_dir=$(bash scripts/sglang-env.sh "$release" | tail -n 1)
  release_context=$context/sglang-$release
  mkdir -p "$release_context"
  sglang_pins > "$release_context/requirements.txt"
  want=$({ declare -f sglang_base; cat images/stand-in/sglang.Dockerfile; image_id "$TORCH_BASE"
    cat "$release_context/requirements.txt" "$env_dir/.dressage-stamp"; } | hash_of)
  have=$(current_recipe "$SGLANG_BASE:$release")
  if [ "$have" != "$want" ]; then
    echo "build-stand-in-bases: building $SGLANG_BASE:$release" >&2
    # The release's package, copied only for a build (the stamp above stands for it).
    cp -a "$env_dir" "$release_context/site"
    sglang_base "$want" "$release" "$release_context"
  fi
  echo "sglang-$release=$SGLANG_BASE:$release"
done
