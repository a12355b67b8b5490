"""The collective timeout reaches torch.distributed's rendezvous: rank 0 of a gang of two, alone
on a loopback TCP store, gives up after the timeout it was given."""

from __future__ import annotations

import socket
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from dressage.trainer.distributed import DistEnv, init_distributed


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
