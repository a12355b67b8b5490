"""The long-tail benchmark's smallest piece (`--quick`, one partial-async setting: its 3 warm-up
steps and one or two measured ones) runs end to end: a real `dressage run` stopped by the
benchmark, with the engine's counters read after each step and the figures written to the
results JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
STEPS = 5
"""The run's step cap: partial async's 3 warm-up steps (`long_tail.Setting.warmup_steps`), then
the measured ones, which the 3 s budget may end after one."""


def test_the_quick_mode_measures_one_partial_async_setting(tmp_path: Path) -> None:
    out = tmp_path / "long_tail.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "long_tail.py"),
            "--quick",
            "--settings",
            "partial1+adm",
            "--seconds",
            "3",
            "--max-steps",
            str(STEPS),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    entry = results["summary"]["partial1+adm"]
    assert entry["samples_per_s"] > 0
    assert 0 < entry["engine_busy_fraction"] <= 1
    assert 0 < entry["engine_active_fraction"] <= 1
    assert entry["max_version_span"] <= 2  # maxPartialRolloutPreempts 1
    assert sum(entry["version_spans"].values()) > 0
    (run,) = results["runs"]["partial1+adm"]
    # Partial async warms up for 3 steps: the 4th (the 3 s budget) or 5th step is measured.
    assert 4 <= run["steps"] <= STEPS
    assert len(run["reward_curve"]) == run["steps"]
    assert (tmp_path / "long_tail.png").is_file()
    assert "partial, preempts 1 + admission" in (tmp_path / "long_tail.md").read_text()
