"""The fleet-scale benchmark's quick mode runs end to end: a simulated fleet of 8 and then 16
engines behind real proxies (1 and 2 replicas), a real disk publish and the distributed path's
control messages, churn, and the operator reconciling one job of each size on the API
emulation, its figures written to the results JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_mode_measures_each_figure_at_two_fleet_sizes(tmp_path: Path) -> None:
    out = tmp_path / "fleet_scale.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fleet_scale.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [r["engines"] for r in result["results"]] == [8, 16]
    for figures in result["results"]:
        assert set(figures["proxy"]) == {"1", "2"}
        assert figures["proxy"]["1"]["requests_per_s"] > 0
        assert figures["proxy"]["1"]["failed"] == 0
        assert figures["publish_overhead_ms"]["disk"] is not None
        assert figures["publish_overhead_ms"]["disk_direct"] is not None
        assert figures["publish_engines_held_out"] == 0
        assert figures["churn"]["lost_silently"] == 0
        assert figures["operator"]["seconds_to_all_children"] > 0
        assert figures["operator"]["status_bytes"] < 64 * 1024
        assert figures["series_per_job"] > figures["sglang_series"]
    assert len(result["load_average_before"]) == 3
