"""torch.distributed set-up from the rendezvous environment torchrun and the operator provide.

Variables read: `WORLD_SIZE`, `RANK` (or `NODE_RANK` with one process per node),
`LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`. With a world size of 1 no process group is created
and every collective here is a no-op, so the same trainer code runs in-process under
`dressage run`. Backend: NCCL when the trainer is on GPUs, gloo on CPU.

A process that joined a gang of more than one rank ends through `exit_process` (see
`shutdown_distributed` for why).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

# Ranks other than 0 wait in a collective for rank 0's first batch, which comes after the
# engines' warm-up and the first rollouts: the default collective timeout must cover that.
DEFAULT_TIMEOUT = timedelta(minutes=30)

# Set once this process has joined a process group of more than one rank.
_joined_gang = False


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the trainer gang."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 publishes weights, writes checkpoints and runs the collector."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def dist_env_from(environ: Mapping[str, str]) -> DistEnv:
    """Parse the rendezvous variables (pure; raises naming the variable at fault)."""

    def as_int(name: str, default: int) -> int:
        raw = environ.get(name)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise ValueError(
                f"environment variable {name} must be an integer, got {raw!r}"
            ) from None

    world = as_int("WORLD_SIZE", 1)
    local_rank = as_int("LOCAL_RANK", 0)
    if "RANK" in environ:
        rank = as_int("RANK", 0)
    else:
        # One process per node (no torchrun): the node rank is the global rank.
        rank = as_int("NODE_RANK", 0) * as_int("LOCAL_WORLD_SIZE", 1) + local_rank
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} must lie in 0..WORLD_SIZE-1 (WORLD_SIZE={world})")
    if world > 1:
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not environ.get(name):
                raise ValueError(f"environment variable {name} is required when WORLD_SIZE > 1")
    return DistEnv(rank=rank, world_size=world, local_rank=local_rank)


def device_for(env: DistEnv, use_gpu: bool) -> torch.device:
    """The device this worker trains on."""
    if use_gpu and torch.cuda.is_available():
        return torch.device("cuda", env.local_rank)
    return torch.device("cpu")


def init_distributed(
    env: DistEnv, device: torch.device, timeout: timedelta | float = DEFAULT_TIMEOUT
) -> None:
    """Join the process group (NCCL on GPU, gloo on CPU); nothing for a world of one.

    `timeout` (a `timedelta` or seconds) bounds every collective, the rendezvous included: a
    rank waiting longer than that for its peers fails instead of hanging. The default (30
    minutes) covers ranks != 0 waiting for rank 0's first batch, engine warm-up included.
    """
    global _joined_gang
    if isinstance(timeout, timedelta):
        limit = timeout
    elif isinstance(timeout, int | float) and not isinstance(timeout, bool):
        limit = timedelta(seconds=timeout)
    else:
        raise TypeError(f"timeout must be a timedelta or seconds, got {timeout!r}")
    if limit <= timedelta(0):
        raise ValueError(f"timeout must be positive, got {limit}")
    if not env.distributed or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=env.rank,
        world_size=env.world_size,
        timeout=limit,
    )
    _joined_gang = True


def shutdown_distributed() -> None:
    """Leave the process group (`destroy_process_group`); the process then ends through
    `exit_process`.

    `destroy_process_group` drops the package's references to the group, but the group lives
    on while anything else holds it, and a module sharded over it (`fully_shard`) holds it as long
    as the module lives: after this call gloo's work threads and TCP loop thread are still running
    in the test worker when the interpreter finalizes. A gloo thread that takes the GIL while
    the interpreter finalizes is ended by CPython (`pthread_exit`); the unwinding reaches a C++
    frame that may not throw, and `std::terminate` aborts the process with `terminate called
    without an active exception` (SIGABRT). Forced (a Python callback on a collective that
    completes while rank 0 finalizes), that abort happens in every run. A 2-rank gloo gang
    (torch 2.13 CPU) has been seen to abort that way at exit about 1 run in 7 under load; on a
    2-core machine it did not recur in 60 runs of a minimal 2-rank script, 60 runs of the
    data-parallel test worker, or 30 runs with both ranks on one core: the rate depends on load
    and timing.
    `exit_process` ends the process with `os._exit` instead, so no finalization or C++ static
    destructor runs while those threads live: 0 aborts in 60 runs of the test worker.

    No barrier here: this runs on error paths too, where a peer may never arrive.
    """
    if dist.is_initialized():
        dist.destroy_process_group()


def exit_process(code: int) -> int:
    """End a process that joined a gang with exit status `code`, without interpreter
    finalization; in a process that never joined one, return `code` unchanged.

    Call it last, once `shutdown_distributed` has run and everything the process writes is
    closed: logging is shut down and stdout/stderr flushed here, but atexit handlers and
    object finalizers do not run.
    """
    if not _joined_gang:
        return code
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # A closed or broken stream has nothing left to deliver.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def broadcast_object(obj: Any, env: DistEnv) -> Any:
    """`obj` from rank 0 on every rank (identity for a world of one)."""
    if not env.distributed:
        return obj
    box = [obj if env.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_sum(values: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Element-wise sum of `values` over all ranks (identity for a world of one)."""
    if env.distributed:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def barrier(env: DistEnv) -> None:
    if env.distributed:
        dist.barrier()


def current_env() -> DistEnv:
    """`dist_env_from(os.environ)`."""
    return dist_env_from(os.environ)
