"""Children that live as long as the job: the ConfigMap, the Services, the NetworkPolicy."""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from dressage.api.job import AsyncRLJob, ObjectMeta
from dressage_operator import naming
from dressage_operator.children.engine import engine_urls
from dressage_operator.children.pods import Obj, Owner, finish, model_path, object_meta
from dressage_operator.children.weight_sync import distributed_sync
from dressage_operator.config import OperatorConfig


def runtime_manifest(job: AsyncRLJob, owner: Owner) -> str:
    """The job manifest the runtime reads from `/etc/dressage/job.yaml`: the job's spec, with
    `model.source` naming where the pods read the model (the staged directory of a hub id), so
    `dressage train` and `dressage proxy` load the staged copy and never the hub."""
    spec = job.spec.model_copy(
        update={"model": job.spec.model.model_copy(update={"source": model_path(job)})}
    )
    clean = AsyncRLJob(
        metadata=ObjectMeta(
            name=owner.name, namespace=owner.namespace, labels=dict(job.metadata.labels)
        ),
        spec=spec,
    )
    return yaml.safe_dump(clean.to_wire(), sort_keys=False)


def build_config_map(job: AsyncRLJob, owner: Owner, leaving: Sequence[int] = ()) -> Obj:
    """The job's manifest for the runtime, and the engine URLs the proxy follows: the
    job's `inference.replicas` engines and the `leaving` ones a scale-down is draining."""
    return finish(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": object_meta(job, owner, naming.config_map(owner.name), naming.ROLE_CONFIG),
            "data": {
                naming.CONFIG_KEY: runtime_manifest(job, owner),
                naming.ENGINES_KEY: "".join(f"{url}\n" for url in engine_urls(job, owner, leaving)),
            },
        }
    )


def _headless_service(
    job: AsyncRLJob,
    owner: Owner,
    name: str,
    role: str,
    ports: list[Obj],
    *,
    not_ready: bool = True,
) -> Obj:
    return finish(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": object_meta(job, owner, name, role),
            "spec": {
                "clusterIP": "None",
                # Rendezvous and engine discovery need DNS before the pods are ready.
                "publishNotReadyAddresses": not_ready,
                "selector": naming.selector(owner.name, role),
                "ports": ports,
            },
        }
    )


def build_trainer_service(job: AsyncRLJob, owner: Owner) -> Obj:
    ports = [
        {"name": "rendezvous", "port": naming.RENDEZVOUS_PORT, "targetPort": "rendezvous"},
        {"name": "metrics", "port": naming.METRICS_PORT, "targetPort": "metrics"},
    ]
    if distributed_sync(job):
        port = job.spec.inference.weight_sync_port
        ports.append({"name": naming.WEIGHT_SYNC_PORT_NAME, "port": port, "targetPort": port})
    return _headless_service(
        job, owner, naming.trainer_service(owner.name), naming.ROLE_TRAINER, ports
    )


def build_engine_service(job: AsyncRLJob, owner: Owner) -> Obj:
    ports = [{"name": "http", "port": naming.ENGINE_PORT, "targetPort": "http"}]
    return _headless_service(
        job, owner, naming.engine_service(owner.name), naming.ROLE_INFERENCE, ports
    )


def build_proxy_service(job: AsyncRLJob, owner: Owner) -> Obj:
    return finish(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": object_meta(job, owner, naming.proxy(owner.name), naming.ROLE_PROXY),
            "spec": {
                "type": "ClusterIP",
                "selector": naming.selector(owner.name, naming.ROLE_PROXY),
                "ports": [{"name": "http", "port": naming.PROXY_PORT, "targetPort": "http"}],
            },
        }
    )


def build_proxy_replicas_service(job: AsyncRLJob, owner: Owner) -> Obj:
    """`<job>-proxy-replicas`: a headless Service of the proxy pods. Its A records are the
    ready replicas, which the trainer's proxy client hashes each prompt group onto and fans
    pause, continue and version changes out to, and which an engine's drain hook drains on
    (`naming.proxy_urls`); the ClusterIP Service stays for what is bound to no session."""
    ports = [{"name": "http", "port": naming.PROXY_PORT, "targetPort": "http"}]
    # Only ready replicas: a starting proxy must not be hashed onto before it listens.
    return _headless_service(
        job,
        owner,
        naming.proxy_replicas_service(owner.name),
        naming.ROLE_PROXY,
        ports,
        not_ready=False,
    )


def build_network_policy(job: AsyncRLJob, owner: Owner) -> Obj:
    """`<job>-serving`: only the job's own pods (trainer, engines, proxy) reach its engines and
    its proxy, on any port. Anything else that must reach them (a Prometheus scraping the
    engines' or the proxy's `/metrics`, an agent outside the job) needs a policy of its own."""
    return finish(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": object_meta(
                job, owner, naming.network_policy(owner.name), naming.ROLE_CONFIG
            ),
            "spec": {
                "podSelector": {
                    "matchLabels": {naming.LABEL_JOB: owner.name},
                    "matchExpressions": [
                        {
                            "key": naming.LABEL_ROLE,
                            "operator": "In",
                            "values": [naming.ROLE_INFERENCE, naming.ROLE_PROXY],
                        }
                    ],
                },
                "policyTypes": ["Ingress"],
                "ingress": [
                    {"from": [{"podSelector": {"matchLabels": {naming.LABEL_JOB: owner.name}}}]}
                ],
            },
        }
    )


def build_infrastructure(
    job: AsyncRLJob,
    owner: Owner,
    config: OperatorConfig | None = None,
    leaving: Sequence[int] = (),
) -> list[Obj]:
    """Children that live as long as the job: config, Services and, when the operator is
    configured for it, the NetworkPolicy of its engines and proxy."""
    objs = [
        build_config_map(job, owner, leaving),
        build_trainer_service(job, owner),
        build_engine_service(job, owner),
        build_proxy_service(job, owner),
        build_proxy_replicas_service(job, owner),
    ]
    if config is not None and config.network_policies:
        objs.append(build_network_policy(job, owner))
    return objs
