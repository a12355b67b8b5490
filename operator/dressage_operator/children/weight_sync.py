"""The weight-sync wiring: the weight-update group between trainer rank 0 and the engines."""

from __future__ import annotations

from dataclasses import dataclass

from dressage.api.job import AsyncRLJob
from dressage_operator import naming
from dressage_operator.children.pods import Owner

WEIGHT_SYNC_ADDRESS_ENV = "DRESSAGE_WEIGHT_SYNC_ADDRESS"
WEIGHT_SYNC_PORT_ENV = "DRESSAGE_WEIGHT_SYNC_PORT"
"""The weight-update group's rendezvous, as `dressage train` reads it."""
DEFAULT_WEIGHTS_GROUP = "weight_update_group"
"""SGLang's default group name, which the trainer uses (`dressage.engine.protocol`)."""
NCCL_ENV: dict[str, str] = {
    "NCCL_CUMEM_ENABLE": "0",
    "NCCL_DEBUG": "WARN",
}
"""On trainer and engine pods of a GPU job with distributed weight sync: SGLang's scheduler
runs NCCL with cuMem allocation off, and both ends of a communicator must agree; NCCL's
warnings name the cause when the weight-update group fails. Template env overrides them."""


def distributed_sync(job: AsyncRLJob) -> bool:
    """Whether the job's weights reach its engines over a weight-update group."""
    return job.spec.inference.weight_sync == "distributed"


@dataclass(frozen=True)
class WeightSyncRendezvous:
    """The weight-update group of a job: trainer rank 0 and every engine's ranks."""

    master_address: str
    master_port: int
    world_size: int
    rank_offsets: tuple[int, ...]
    """Engine `i` joins at `rank_offsets[i]` (its tensor-parallel ranks follow)."""
    group_name: str
    backend: str


def weight_sync_rendezvous(job: AsyncRLJob, owner: Owner) -> WeightSyncRendezvous:
    """Where and how the trainer and the engines meet; the trainer computes the same ranks
    from the engine URLs it is given (`dressage.orchestrator.weight_sync`)."""
    inference = job.spec.inference
    tp = inference.tensor_parallel_size
    return WeightSyncRendezvous(
        master_address=naming.trainer_host(owner.name, owner.namespace, 0),
        master_port=inference.weight_sync_port,
        world_size=1 + inference.replicas * tp,
        rank_offsets=tuple(1 + i * tp for i in range(inference.replicas)),
        group_name=DEFAULT_WEIGHTS_GROUP,
        backend="nccl" if job.spec.trainer.gpus_per_node > 0 else "gloo",
    )


def weight_sync_env(job: AsyncRLJob, owner: Owner) -> dict[str, str]:
    """The trainer's weight-sync variables (`dressage train` reads them), plus the NCCL
    environment on GPU; nothing with disk sync."""
    if not distributed_sync(job):
        return {}
    rendezvous = weight_sync_rendezvous(job, owner)
    env = {
        WEIGHT_SYNC_ADDRESS_ENV: rendezvous.master_address,
        WEIGHT_SYNC_PORT_ENV: str(rendezvous.master_port),
    }
    if rendezvous.backend == "nccl":
        env |= NCCL_ENV
    return env
