"""The weight-sync wiring between trainer rank 0 and the engines."""

from __future__ import annotations

from dressage_operator import children, naming

from dressage.orchestrator import train_cli

from .support import CONFIG, OWNER, distributed_job, env_of, hub_job, train_args


def test_distributed_sync_wires_the_weight_update_group_between_trainer_rank_0_and_engines() -> (
    None
):
    """Trainer rank 0's stable name and a declared port; each engine's own group of rank 0
    and its 2 TP ranks; the trainer's own wiring and sender arrive at the same groups from
    the environment given."""
    from dressage.orchestrator.pipeline import weight_sync_wiring
    from dressage.weights.fleet import FleetWeightSender
    from dressage.weights.membership import ENGINE_RANK_OFFSET

    job = distributed_job()
    rendezvous = children.weight_sync_rendezvous(job, OWNER)
    assert rendezvous.master_address == "job-a-trainer-0.job-a-trainer.ns.svc"
    assert (rendezvous.master_port, rendezvous.world_size) == (29700, 3)
    assert (rendezvous.rank_offset, rendezvous.backend) == (1, "nccl")

    trainer = children.build_trainer_pods(job, OWNER, CONFIG, gang=0)[0]
    (container,) = trainer["spec"]["containers"]
    env = env_of(container)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[naming.WEIGHT_SYNC_PORT_NAME] == 29700
    service = children.build_trainer_service(job, OWNER)
    assert {"name": "weight-sync", "port": 29700, "targetPort": 29700} in service["spec"]["ports"]
    assert (env["NCCL_CUMEM_ENABLE"], env["NCCL_DEBUG"]) == ("0", "WARN")
    (engine,) = children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"]["containers"]
    assert env_of(engine)["NCCL_CUMEM_ENABLE"] == "0"

    import torch

    wiring = train_cli.resolve_wiring(train_args(), env)

    sync = weight_sync_wiring(
        job.spec, wiring.weight_sync_address, wiring.weight_sync_port, torch.device("cuda")
    )
    assert sync is not None
    assert (sync.master_address, sync.master_port) == (
        rendezvous.master_address,
        rendezvous.master_port,
    )
    assert sync.backend == rendezvous.backend
    sender = FleetWeightSender(
        master_address=sync.master_address,
        master_port=sync.master_port,
        backend=sync.backend,
        ranks_per_engine=sync.ranks_per_engine,
    )
    assert sender.world_size == rendezvous.world_size
    assert rendezvous.rank_offset == ENGINE_RANK_OFFSET


def test_disk_sync_declares_no_weight_sync_port_or_environment() -> None:
    job = hub_job()
    (container,) = children.build_trainer_pods(job, OWNER, CONFIG, gang=0)[0]["spec"]["containers"]
    assert naming.WEIGHT_SYNC_PORT_NAME not in {p["name"] for p in container["ports"]}
    assert not {"DRESSAGE_WEIGHT_SYNC_ADDRESS", "NCCL_CUMEM_ENABLE"} & set(env_of(container))
