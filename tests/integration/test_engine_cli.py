"""`dressage engine serve` and `dressage run`, as processes, refuse a device torch cannot use
before starting anything, naming `--device`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["engine", "serve"], ["run", "examples/local-tiny.yaml"]])
def test_cli_refuses_an_unusable_device_before_starting(command: list[str]) -> None:
    device = f"cuda:{torch.cuda.device_count()}"
    proc = subprocess.run(
        [sys.executable, "-m", "dressage", *command, "--device", device],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--device: '{device}'" in proc.stderr
