"""The engine-churn benchmark's quick mode runs end to end: a real `dressage run` with a fixed
fleet and one with an engine killed, one added and one drained while it trains, the figures
printed and written to the results JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_mode_measures_a_run_with_churn_next_to_one_without(tmp_path: Path) -> None:
    out = tmp_path / "engine_churn.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "engine_churn.py"),
            "--quick",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "drained tokens moved/trained/lost" in proc.stdout
    results = json.loads(out.read_text())
    disk = results["summary"]["disk"]
    assert disk["samples_per_s_fixed"] > 0
    assert disk["samples_per_s_churn"] > 0
    assert disk["churn_over_fixed"] == disk["samples_per_s_churn"] / disk["samples_per_s_fixed"]
    assert disk["trainer_restarts"] == 0
    churned = results["runs"]["churn-disk-churn"]
    assert churned["steps"] == results["steps"]
    assert [e["event"] for e in churned["events"]] == [
        "kill@2:engine-0",
        "add@3:engine-2",
        "drain@5:engine-1",
    ]
    assert all(e["ok"] for e in churned["events"]), churned["events"]
    assert churned["not_carried_out"] == []
    assert churned["engines_at_end"] == ["engine-2"]
    # Whether a turn is in flight on the drained engine when the drain comes is the run's
    # timing (a drain that moves turns is pinned by tests/integration/test_proxy_drain.py and
    # the cluster churn test). What the trained samples hold of the drained tokens never
    # exceeds what was moved; the quick run may end before the last drained turns are trained.
    assert 0 <= churned["drained_tokens_trained"] <= churned["drained_tokens_moved"]
    fixed = results["runs"]["churn-disk-fixed"]
    assert fixed["drained_turns"] == 0
    assert "events" not in fixed
