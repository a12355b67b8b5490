# shellcheck shell=bash
# Sourced by the image scripts: `container_engine ARGS...` runs podman or docker, whichever is
# on PATH (podman first; $DRESSAGE_CONTAINER_ENGINE names another). Podman gets the settings
# the test machines need (images/podman/containers.conf) unless CONTAINERS_CONF names others.
CONTAINER_ENGINE=${DRESSAGE_CONTAINER_ENGINE:-$(command -v podman || command -v docker || true)}
if [ -z "$CONTAINER_ENGINE" ]; then
  echo "neither podman nor docker is on PATH (or set DRESSAGE_CONTAINER_ENGINE)" >&2
  exit 1
fi
if [ "$(basename "$CONTAINER_ENGINE")" = podman ]; then
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/images/podman/containers.conf}
fi
container_engine() { "$CONTAINER_ENGINE" "$@"; }
