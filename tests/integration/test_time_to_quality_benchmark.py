"""The time-to-quality benchmark's smoke test: sync and fully async without staleness control,
one seed of 2 steps each, evaluated every step, end to end: real `dressage run`s with held-out
evaluation, the figures against sync, the table and the plot written next to the JSON. The
figures, the interpolation and the intervals are pinned by the unit tests in
`tests/unit/benchmarks/test_time_to_quality.py`, so this test runs as few runs as it can."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_mode_evaluates_every_setting_against_sync(tmp_path: Path) -> None:
    out = tmp_path / "ttq.json"
    script = ROOT / "benchmarks" / "time_to_quality.py"
    args = ["--quick", "--settings", "sync,async", "--steps", "2", "--every-steps", "1"]
    proc = subprocess.run(
        [sys.executable, str(script), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["complete"]
    assert results["revision"]
    assert results["date"]
    assert results["load_average"]["min"] is not None
    assert [s["key"] for s in results["settings"]] == ["sync", "async"]
    for setting in results["settings"]:
        (seed,) = setting["seeds"]
        assert seed["status"] == "ok"
        assert seed["steps"] == 2
        assert [p["step"] for p in seed["curve"]] == [0.0, 1.0, 2.0]  # v0, then every step
        assert seed["lag_mean"] is not None
    assert results["settings"][0]["seeds"][0]["lag_max"] == 0  # sync trains on-policy data
    table = (tmp_path / "ttq.md").read_text()
    assert "| fully async, no staleness control | " in table
    assert (tmp_path / "ttq.png").is_file()
