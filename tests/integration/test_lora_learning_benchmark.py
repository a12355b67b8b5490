"""The LoRA learning benchmark's quick mode runs end to end: `examples/local-lora.yaml` and
`examples/local-tiny.yaml` for a few steps each, the table printed and the results written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_mode_compares_an_adapter_with_full_weights(tmp_path: Path) -> None:
    out = tmp_path / "lora_learning.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "lora_learning.py"), "--quick",
         "--out", str(out), "--workdir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "setting | steps" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert rows["lora"]["steps"] == rows["full"]["steps"] == 4
    assert 0 < rows["lora"]["trainable_parameters"] < rows["full"]["trainable_parameters"]
    assert 0 < rows["lora"]["publish_bytes"] < rows["full"]["publish_bytes"]
    assert rows["lora"]["trainer_peak_rss_mib"] > 0
