"""Children that live as long as the job: the ConfigMap, the Services, the NetworkPolicy."""

from __future__ import annotations

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


def build_config_map(job: AsyncRLJob, owner: Owner) -> Obj:
    return finish(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": object_meta(job, owner, naming.config_map(owner.name), naming.ROLE_CONFIG),
            "data": {
                naming.CONFIG_KEY: runtime_manifest(job, owner),
                naming.ENGINES_KEY: "".join(f"{url}\n" for url in engine_urls(job, owner)),
            },
        }
    )


def _headless_service(job: AsyncRLJob, owner: Owner, name: str, role: str, ports: list[Obj]) -> Obj:
    return finish(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": object_meta(job, owner, name, role),
            "spec": {
                "clusterIP": "None",
                # Rendezvous and engine discovery need DNS before the pods are ready.
                "publishNotReadyAddresses": True,
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
    job: AsyncRLJob, owner: Owner, config: OperatorConfig | None = None
) -> list[Obj]:
    """Children that live as long as the job: config, Services and, when the operator is
    configured for it, the NetworkPolicy of its engines and proxy."""
    objs = [
        build_config_map(job, owner),
        build_trainer_service(job, owner),
        build_engine_service(job, owner),
        build_proxy_service(job, owner),
    ]
    if config is not None and config.network_policies:
        objs.append(build_network_policy(job, owner))
    return objs
