"""The GPU check (`benchmarks/gpu_check.py`, run by `scripts/gpu-check.sh`) on CPU.

`--device cpu --small` runs the same parts with small shapes: the trainer's GRPO steps, the
embedded engine serving and reloading from its device, the one-device FSDP2 bf16 step over a
process group of one, and a short `dressage run --device cpu`. Each part must pass and report
its figures, so the script a GPU machine runs is code the suite exercises.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _check(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--small", "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    figures = json.loads(out.read_text()) if out.is_file() else {}
    return proc, figures


def _assert_passed(
    proc: subprocess.CompletedProcess[str], figures: dict[str, Any], parts: list[str]
) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p["part"] for p in figures["parts"]] == parts
    for part in figures["parts"]:
        assert part["ok"], part
        assert part["step_seconds"] > 0, part
        assert part["tokens_per_second"] > 0, part
        assert part["peak_memory_bytes"] is None  # no device memory count on CPU
    assert proc.stdout.strip().splitlines()[-1].startswith("gpu-check: PASS on cpu")


def test_trainer_engine_and_fsdp_parts_pass_on_cpu(tmp_path: Path) -> None:
    parts = ["trainer", "engine", "fsdp"]
    proc, figures = _check(tmp_path, "--device", "cpu", "--parts", ",".join(parts))
    _assert_passed(proc, figures, parts)
    fsdp = figures["parts"][2]
    assert "FSDP2 bf16" in fsdp["detail"]
    assert fsdp["extra"]["parameters"] > 0


@pytest.mark.slow
def test_run_part_passes_on_cpu(tmp_path: Path) -> None:
    proc, figures = _check(tmp_path, "--device", "cpu", "--parts", "run")
    _assert_passed(proc, figures, ["run"])


def test_a_device_torch_cannot_use_fails_with_a_verdict(tmp_path: Path) -> None:
    import torch

    device = f"cuda:{torch.cuda.device_count()}"  # one past the last device, if any
    proc, figures = _check(tmp_path, "--device", device, "--parts", "trainer")
    assert proc.returncode == 2
    assert figures == {}
    assert proc.stdout.strip().splitlines()[-1].startswith("gpu-check: FAIL: --device")


def test_unknown_part_is_refused(tmp_path: Path) -> None:
    proc, _ = _check(tmp_path, "--device", "cpu", "--parts", "trainer,warp")
    assert proc.returncode == 2
    assert "--parts: unknown ['warp']" in proc.stderr
