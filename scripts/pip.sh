# shellcheck shell=bash
# Sourced by the setup scripts: `pip_install ARGS...` runs the main venv's pip quietly.
# The machine's pip config may list local mirrors that do not exist; their warnings are noise.
pip_install() {
  "${VENV:-.venv}/bin/pip" install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "^WARNING: Location .* is ignored" || true; }
  return "${PIPESTATUS[0]}"
}
