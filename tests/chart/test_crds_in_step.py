"""The chart's CRDs are byte-for-byte the generated ones in crds/.

Helm installs the files in the chart's crds/ directory as they are (that directory is not
templated), so the chart carries copies; `bash scripts/sync-chart-crds.sh` refreshes them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.chart.tools import CHART, ROOT

SOURCE = ROOT / "crds"
CHART_CRDS = CHART / "crds"
SYNC = ROOT / "scripts" / "sync-chart-crds.sh"


def _yaml_files(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.yaml"))}


def test_chart_crds_match_the_generated_crds() -> None:
    source = _yaml_files(SOURCE)
    assert source, "crds/ holds no CRD: run `bash scripts/gen-crds.sh`"
    chart = _yaml_files(CHART_CRDS)
    hint = "run `bash scripts/sync-chart-crds.sh`"
    assert sorted(chart) == sorted(source), hint
    for name, text in source.items():
        assert chart[name] == text, f"charts/dressage-operator/crds/{name} differs: {hint}"


def test_sync_script_mirrors_crds_into_the_chart(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(SYNC, tmp_path / "scripts" / SYNC.name)
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "dressage.io_asyncrljobs.yaml").write_text(
        "kind: CustomResourceDefinition\n"
    )
    chart_crds = tmp_path / "charts" / "dressage-operator" / "crds"
    chart_crds.mkdir(parents=True)
    (chart_crds / "dressage.io_retired.yaml").write_text("old\n")
    (chart_crds / "dressage.io_asyncrljobs.yaml").write_text("stale\n")

    subprocess.run(["bash", str(tmp_path / "scripts" / SYNC.name)], check=True, capture_output=True)

    assert _yaml_files(chart_crds) == {
        "dressage.io_asyncrljobs.yaml": b"kind: CustomResourceDefinition\n"
    }
