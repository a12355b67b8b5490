#!/usr/bin/env bash
# Build Dressage's images: the one way to build them, used by the tests (tests/images), the docs
# and the release workflow.
#
#   bash scripts/build-images.sh [--registry R] [--tag T] [--push] [--only IMAGE ...]
#       [--sglang-release RELEASE ...] [--platform P[,P...]] [--base-python IMG]
#       [--base-torch IMG] [--base-torch-cpu IMG] [--base-sglang IMG] [--stand-in-bases]
#       [--dry-run]
#
# Images, from images/<image>/Dockerfile with the repository as the build context:
#   operator     R/dressage-operator:T
#   runtime      R/dressage-runtime:T        trainer, proxy and embedded engine on CUDA torch
#   runtime-cpu  R/dressage-runtime:T-cpu    the same on the CPU build of torch, from PyTorch's
#                CPU index (https://download.pytorch.org/whl/cpu) on the Python base: about
#                1.8 GB, for CPU jobs (kind: docs/quickstart-kind.md)
#   sglang       R/dressage-sglang:T-sglang<release>, one per --sglang-release (default: the
#                release jobs default to, dressage.api.sglang.SGLANG_DEFAULT_VERSION)
# R defaults to the chart's registry (charts/dressage-operator/values.yaml `image.repository`:
# ghcr.io/dressage) and T to the project's version (pyproject.toml, the chart's appVersion),
# the images the chart and the operator name by default. `--only` (repeatable) builds a subset;
# without it, all but runtime-cpu (`--only runtime-cpu` builds that one).
# The bases are the Dockerfiles' defaults (what a release builds on) unless named: --base-python
# (operator, and runtime-cpu's Python), --base-torch (runtime), --base-torch-cpu (runtime-cpu:
# a Python base that holds the CPU torch already, so the index is not asked), --base-sglang
# (sglang; `{release}` in it stands for the release). --stand-in-bases builds or reuses local
# stand-ins for them (scripts/build-stand-in-bases.sh) for machines that cannot pull them;
# DRESSAGE_STAND_IN_BASES=1 does the same (the tests run the docs' commands as written with it).
# --platform builds for those platforms (e.g. linux/amd64,linux/arm64): docker builds with
# buildx (`docker buildx build`, pushing with --push, else loading a single platform), podman
# into a manifest list named by the reference (`podman manifest push --all` with --push).
# The engine: DRESSAGE_CONTAINER_ENGINE (docker or podman), else docker when on PATH, else
# podman (scripts/container-engine.sh); the script says which on stderr, and the images are in
# that engine's store (`kind load docker-image` reads Docker's). The engine runs with its user's
# own settings. Layers are reused while a Dockerfile and its inputs are unchanged; a source
# change rebuilds only the project's layer.
# Prints one `IMAGE=REFERENCE` line per image built (`sglang-<release>=...` for engines) on
# stdout, and `IMAGE.base=REFERENCE` for a base named here; the builds' own output goes to stderr.
# --dry-run prints the images' references and builds nothing. --push pushes each after building it.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '/^#   bash scripts\/build-images.sh/,/^#$/p' "$0" | sed -e 's/^# *//' -e '/^$/d' >&2
  exit 2
}
registry=$(sed -n 's/^  repository: \(.*\)\/dressage-operator$/\1/p' charts/dressage-operator/values.yaml)
tag=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
version=$tag
# runtime-cpu's defaults: the operator's Python base, and the torch release the tests run
# (scripts/setup.sh) from PyTorch's CPU index.
default_python=$(sed -n 's/^ARG PYTHON_IMAGE=\(.*\)$/\1/p' images/operator/Dockerfile)
torch_version=$(sed -n 's/.*"torch==\([0-9.]*\)".*/\1/p' scripts/setup.sh | head -n 1)
torch_cpu_index=https://download.pytorch.org/whl/cpu
push=false
dry_run=false
stand_in=false
[ "${DRESSAGE_STAND_IN_BASES:-}" != 1 ] || stand_in=true
only=()
releases=()
platform=""
base_python=""
base_torch=""
base_torch_cpu=""
base_sglang=""
while [ $# -gt 0 ]; do
  case $1 in
    --registry|--tag|--only|--sglang-release|--platform|--base-python|--base-torch|--base-torch-cpu|--base-sglang)
      [ $# -ge 2 ] || usage ;;&
    --registry) registry=${2%/}; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --push) push=true; shift ;;
    --only)
      case $2 in
        operator|runtime|runtime-cpu|sglang) only+=("$2") ;;
        *) echo "--only: operator, runtime, runtime-cpu or sglang" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --sglang-release) releases+=("$2"); shift 2 ;;
    --platform) platform=$2; shift 2 ;;
    --base-python) base_python=$2; shift 2 ;;
    --base-torch) base_torch=$2; shift 2 ;;
    --base-torch-cpu) base_torch_cpu=$2; shift 2 ;;
    --base-sglang) base_sglang=$2; shift 2 ;;
    --stand-in-bases) stand_in=true; shift ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) usage ;;
    *) echo "build-images.sh: unknown argument: $1" >&2; usage ;;
  esac
done
[ -n "$registry" ] && [ -n "$tag" ] || { echo "build-images.sh: no default registry or tag found" >&2; exit 1; }
[ -n "$default_python" ] && [ -n "$torch_version" ] || { echo "build-images.sh: no default Python base or torch release found" >&2; exit 1; }
[ ${#only[@]} -gt 0 ] || only=(operator runtime sglang)
if [ ${#releases[@]} -eq 0 ]; then
  releases=("$(python3 -c 'import runpy
print(runpy.run_path("dressage/api/sglang.py")["SGLANG_DEFAULT_VERSION"])')")
fi
wants() { [[ " ${only[*]} " == *" $1 "* ]]; }

if ! $dry_run; then
  # shellcheck source=scripts/container-engine.sh
  . scripts/container-engine.sh
  echo "build-images: building with $CONTAINER_ENGINE_NAME ($CONTAINER_ENGINE), into its store;" \
    "DRESSAGE_CONTAINER_ENGINE=docker|podman picks the engine" >&2
fi

if $stand_in && ! $dry_run; then
  release_args=()
  for release in "${releases[@]}"; do release_args+=(--release "$release"); done
  wants sglang || release_args=(--no-sglang)
  while IFS='=' read -r kind reference; do
    case $kind in
      python) base_python=${base_python:-$reference} ;;
      torch)
        base_torch=${base_torch:-$reference}
        # The stand-in torch base is Python plus the CPU wheel: runtime-cpu's base as it is.
        base_torch_cpu=${base_torch_cpu:-$reference} ;;
      sglang-*) stand_in_sglang="${reference%:*}:{release}"; base_sglang=${base_sglang:-$stand_in_sglang} ;;
    esac
  done < <(bash scripts/build-stand-in-bases.sh "${release_args[@]}")
fi

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
build() {  # IMAGE REFERENCE [--build-arg ...]
  local image=$1 reference=$2
  shift 2
  $dry_run && return
  echo "build-images: $reference" >&2
  # --network host: the RUN steps reach the package index through the machine's network
  # (podman's default network needs more of the host than the test machines allow).
  local args=(--network host --file "images/$image/Dockerfile"
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" "$@")
  if [ -z "$platform" ]; then
    container_engine build "${args[@]}" --tag "$reference" . >&2
    if $push; then
      container_engine push "$reference" >&2
    fi
  elif [ "$CONTAINER_ENGINE_NAME" = docker ]; then
    # buildx builds every platform at once; a multi-platform image can only be pushed.
    if $push; then args+=(--push); else args+=(--load); fi
    container_engine buildx build --platform "$platform" "${args[@]}" --tag "$reference" . >&2
  else
    container_engine manifest rm "$reference" >/dev/null 2>&1 || true
    container_engine build --platform "$platform" "${args[@]}" --manifest "$reference" . >&2
    if $push; then
      container_engine manifest push --all "$reference" "docker://$reference" >&2
    fi
  fi
}

if wants operator; then
  args=()
  [ -z "$base_python" ] || args+=(--build-arg "PYTHON_IMAGE=$base_python")
  build operator "$registry/dressage-operator:$tag" "${args[@]}"
  echo "operator=$registry/dressage-operator:$tag"
  [ -z "$base_python" ] || echo "operator.base=$base_python"
fi
if wants runtime; then
  args=()
  [ -z "$base_torch" ] || args+=(--build-arg "TORCH_IMAGE=$base_torch")
  build runtime "$registry/dressage-runtime:$tag" "${args[@]}"
  echo "runtime=$registry/dressage-runtime:$tag"
  [ -z "$base_torch" ] || echo "runtime.base=$base_torch"
fi
if wants runtime-cpu; then
  base=${base_torch_cpu:-${base_python:-$default_python}}
  build runtime "$registry/dressage-runtime:$tag-cpu" --build-arg "TORCH_IMAGE=$base" \
    --build-arg "TORCH_INDEX_URL=$torch_cpu_index" --build-arg "TORCH_VERSION=$torch_version" \
    --build-arg "TORCH_BUILD=CPU"
  echo "runtime-cpu=$registry/dressage-runtime:$tag-cpu"
  [ "$base" = "$default_python" ] || echo "runtime-cpu.base=$base"
fi
if wants sglang; then
  for release in "${releases[@]}"; do
    args=()
    placeholder='{release}'
    base=${base_sglang//"$placeholder"/$release}
    [ -z "$base" ] || args+=(--build-arg "SGLANG_IMAGE=$base")
    build sglang "$registry/dressage-sglang:$tag-sglang$release" "${args[@]}"
    echo "sglang-$release=$registry/dressage-sglang:$tag-sglang$release"
    [ -z "$base" ] || echo "sglang-$release.base=$base"
  done
fi
