"""Device selection of the embedded engine and `dressage run` (`--device`): CPU by default,
CUDA when torch sees it, and a clear refusal naming the flag otherwise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dressage.engine.cli import device_problem

ROOT = Path(__file__).resolve().parents[3]


def test_cpu_is_always_usable() -> None:
    assert device_problem("cpu") is None


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("warp9", "is not a torch device"),
        ("meta", "only cpu and cuda devices are supported"),
        (f"cuda:{torch.cuda.device_count()}", "CUDA device"),
    ],
)
def test_unusable_devices_are_named(device: str, expected: str) -> None:
    problem = device_problem(device)
    assert problem is not None
    assert expected in problem
    assert device in problem


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
