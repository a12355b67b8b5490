"""Device selection of the embedded engine and `dressage run` (`--device`): CPU by default,
CUDA when torch sees it, and a clear refusal naming the flag otherwise (the commands' own
refusal is in tests/integration/test_engine_cli.py)."""

from __future__ import annotations

import pytest
import torch

from dressage.engine.cli import device_problem


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
