"""Process-group set-up: bad timeouts are refused naming them, and a process that never joined a
gang is not ended by `exit_process` (the timeout reaching a real rendezvous:
tests/integration/test_trainer_distributed.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

from dressage.trainer.distributed import DistEnv, exit_process, init_distributed


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        (0, ValueError, "timeout must be positive"),
        (timedelta(seconds=-5), ValueError, "timeout must be positive"),
        ("600", TypeError, "timeout must be a timedelta or seconds"),
        (True, TypeError, "timeout must be a timedelta or seconds"),
    ],
)
def test_bad_timeout_is_refused_naming_it(
    timeout: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        init_distributed(DistEnv(), torch.device("cpu"), timeout=timeout)  # type: ignore[arg-type]


def test_exit_process_returns_the_code_when_no_gang_was_joined() -> None:
    init_distributed(DistEnv(), torch.device("cpu"))
    assert exit_process(3) == 3
