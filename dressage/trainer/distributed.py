"""torch.distributed set-up from the rendezvous environment torchrun and the operator provide.

Variables read: `WORLD_SIZE`, `RANK` (or `NODE_RANK` with one process per node),
`LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`. With a world size of 1 no process group is created
and every collective here is a no-op, so the same trainer code runs in-process under
`dressage run`. Backend: NCCL when the trainer is on GPUs, gloo on CPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


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


def init_distributed(env: DistEnv, device: torch.device) -> None:
    """Join the process group (NCCL on GPU, gloo on CPU); nothing for a world of one."""
    if not env.distributed or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend=backend, init_method="env://", rank=env.rank, world_size=env.world_size
    )


def shutdown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


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
