# shellcheck shell=bash
# Sourced by the image scripts: `container_engine ARGS...` runs the container engine, and
# $CONTAINER_ENGINE_NAME says which (docker or podman).
#
# $DRESSAGE_CONTAINER_ENGINE picks it (`docker` or `podman`, or a path to either); unset, it is
# docker when docker is on PATH, else podman. Docker first because kind runs on Docker unless
# told otherwise, and `kind load docker-image` reads Docker's store: on a machine with both,
# DRESSAGE_CONTAINER_ENGINE=podman builds into Podman's store instead (then load the images
# into kind with `podman save -m` and `kind load image-archive`, docs/quickstart-kind.md).
# The engine runs with its user's own settings: nothing here changes them (the test machines'
# Podman settings, images/podman/containers.conf, are the tests' to apply).
if [ -n "${DRESSAGE_CONTAINER_ENGINE:-}" ]; then
  case $(basename "$DRESSAGE_CONTAINER_ENGINE") in
    docker|podman) ;;
    *) echo "DRESSAGE_CONTAINER_ENGINE=$DRESSAGE_CONTAINER_ENGINE: docker or podman" >&2; exit 2 ;;
  esac
  CONTAINER_ENGINE=$(command -v "$DRESSAGE_CONTAINER_ENGINE" || true)
  if [ -z "$CONTAINER_ENGINE" ]; then
    echo "DRESSAGE_CONTAINER_ENGINE=$DRESSAGE_CONTAINER_ENGINE: not found on PATH" >&2
    exit 1
  fi
else
  CONTAINER_ENGINE=$(command -v docker || command -v podman || true)
  if [ -z "$CONTAINER_ENGINE" ]; then
    echo "neither docker nor podman is on PATH (DRESSAGE_CONTAINER_ENGINE names one)" >&2
    exit 1
  fi
fi
# shellcheck disable=SC2034  # read by the scripts that source this file
CONTAINER_ENGINE_NAME=$(basename "$CONTAINER_ENGINE")
# $DRESSAGE_BUILD_CPU_SHARES=N passes `--cpu-shares N` (2 to 262144; the default weight is 1024)
# to every `build`: podman, like Docker's legacy builder, runs each RUN step in a cgroup of its own
# with that CPU weight, where the calling process's `nice` does not reach. The test command
# builds the images beside the suite with 2, so that the build yields the CPU to the suite's
# processes. Unset, builds run at the engine's default.
if [ -n "${DRESSAGE_BUILD_CPU_SHARES:-}" ]; then
  shares=$DRESSAGE_BUILD_CPU_SHARES
  if [[ $shares == *[!0-9]* ]] || [ "$shares" -lt 2 ] || [ "$shares" -gt 262144 ]; then
    echo "DRESSAGE_BUILD_CPU_SHARES=$shares: a whole number, 2 to 262144" >&2
    exit 2
  fi
fi
container_engine() {
  if [ "${1:-}" = build ] && [ -n "${DRESSAGE_BUILD_CPU_SHARES:-}" ]; then
    shift
    set -- build --cpu-shares "$DRESSAGE_BUILD_CPU_SHARES" "$@"
  fi
  "$CONTAINER_ENGINE" "$@"
}
