"""Process-group set-up: the collective timeout reaches torch.distributed, bad values are refused,
and a process that never joined a gang is not ended by `exit_process`."""

from __future__ import annotations

import socket
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from dressage.trainer.distributed import DistEnv, exit_process, init_distributed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("timeout", [timedelta(seconds=1), 1.0], ids=["timedelta", "seconds"])
def test_rank_whose_peer_never_comes_fails_after_the_given_timeout(
    timeout: timedelta | float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rank 0 of a gang of two, alone: the rendezvous waits for rank 1 as long as the timeout.
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    started = time.monotonic()
    with pytest.raises(dist.DistStoreError, match=r"[Tt]imed out"):
        init_distributed(DistEnv(rank=0, world_size=2), torch.device("cpu"), timeout=timeout)
    assert time.monotonic() - started < 30, "the rendezvous ignored the timeout"
    assert not dist.is_initialized()


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
