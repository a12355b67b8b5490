"""The weight-sync wiring: where trainer rank 0 meets the engines' weight-update groups.

Each engine has a group of its own with trainer rank 0 (`dressage.weights.fleet`),
formed when it joins and dropped when it leaves, so engines come and go between publishes
without a trainer restart. The operator wires only the meeting point (rank 0's address and
port) and the backend; the trainer names the groups."""

from __future__ import annotations

from dataclasses import dataclass

from dressage.api.job import AsyncRLJob
from dressage_operator import naming
from dressage_operator.children.pods import Owner

WEIGHT_SYNC_ADDRESS_ENV = "DRESSAGE_WEIGHT_SYNC_ADDRESS"
WEIGHT_SYNC_PORT_ENV = "DRESSAGE_WEIGHT_SYNC_PORT"
"""The weight-update group's rendezvous, as `dressage train` reads it."""
ENGINE_RANK_OFFSET = 1
"""An engine's first rank in its group: trainer rank 0, then the engine's tensor-parallel
ranks (as `dressage.weights.membership` forms them)."""
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
    """Where a job's engines meet trainer rank 0, and the shape of each engine's group."""

    master_address: str
    master_port: int
    world_size: int
    """Of each engine's group: trainer rank 0 and the engine's tensor-parallel ranks."""
    rank_offset: int
    """Every engine's first rank in its own group."""
    backend: str


def weight_sync_rendezvous(job: AsyncRLJob, owner: Owner) -> WeightSyncRendezvous:
    """Where and how the trainer and the engines meet; the trainer forms each engine's group
    of the same shape when the engine joins (`dressage.weights.fleet`)."""
    inference = job.spec.inference
    return WeightSyncRendezvous(
        master_address=naming.trainer_host(owner.name, owner.namespace, 0),
        master_port=inference.weight_sync_port,
        world_size=ENGINE_RANK_OFFSET + inference.tensor_parallel_size,
        rank_offset=ENGINE_RANK_OFFSET,
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
