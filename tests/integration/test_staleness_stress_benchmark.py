"""The staleness stress benchmark's smoke test (`--quick`: the baseline and keepVersions 2 +
admission, one seed of 2 steps each) runs end to end: real `dressage run`s, the figures, the
comparison against the baseline, the tables and the plot written next to the JSON. The figures,
the bootstrap intervals and the seed interleaving are pinned by the unit tests in
`tests/unit/benchmarks/test_staleness_stress.py`, so this test runs as few runs as it can."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_mode_compares_a_control_with_the_baseline(tmp_path: Path) -> None:
    out = tmp_path / "stress.json"
    script = ROOT / "benchmarks" / "staleness_stress.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--quick", "--steps", "2", "--seeds", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["complete"]
    assert results["warm_start"]["targetReward"] == 0.2  # not the job's 0.45: seconds, not minutes
    assert [s["key"] for s in results["settings"]] == ["baseline", "kv2-adm"]
    for setting in results["settings"]:
        assert [s["seed"] for s in setting["seeds"]] == [0]
        assert all(s["status"] == "ok" and s["steps"] == 2 for s in setting["seeds"])
    kv2_adm = results["settings"][1]["seeds"]
    assert all(s["lag_max"] is not None and s["lag_max"] <= 1 for s in kv2_adm)  # window of 2
    table = (tmp_path / "stress.md").read_text()
    assert "| keepVersions 2 + admission |" in table
    assert (tmp_path / "stress.png").is_file()
