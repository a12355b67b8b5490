"""Device selection of the embedded engine and `dressage run` (`--device`): CPU by default,
CUDA when torch sees it, and a clear refusal naming the flag otherwise, before anything starts
(the commands run in this process: one that started an engine would bind a port, which the unit
tier refuses)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from dressage.cli import main
from dressage.engine.embedded.cli import device_problem
from dressage.tasks import usercode

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


@pytest.mark.parametrize(
    "command", [["engine", "serve"], ["run", str(ROOT / "examples" / "local-tiny.yaml")]]
)
def test_the_commands_refuse_an_unusable_device_before_starting(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # `dressage run` adds the job's directory
    monkeypatch.setattr(usercode, "_job_dirs", [])
    device = f"cuda:{torch.cuda.device_count()}"
    assert main([*command, "--device", device]) == 2
    assert f"--device: '{device}'" in capsys.readouterr().err
