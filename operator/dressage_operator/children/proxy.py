"""The proxy: a Deployment of the rollout proxy (its Service is infrastructure)."""

from __future__ import annotations

from dressage.api.job import AsyncRLJob
from dressage_operator import naming
from dressage_operator.children.pods import (
    DEFAULT_REQUESTS,
    Obj,
    Owner,
    container_env,
    container_resources,
    finish,
    model_path,
    object_meta,
    pod_spec,
    proxy_token_env,
    template_meta,
)
from dressage_operator.children.restart import proxy_spec_hash
from dressage_operator.children.scheduling import queue_labels
from dressage_operator.config import OperatorConfig


def proxy_model(job: AsyncRLJob) -> str:
    """The proxy's `--model` (its chat tokenizer reads `tokenizer.json` from it): a local
    `spec.model.tokenizer`, else the model directory; never a hub id (the job's validation
    refuses a hub-id tokenizer)."""
    return job.spec.model.tokenizer or model_path(job)


def proxy_command(job: AsyncRLJob, owner: Owner) -> list[str]:
    """The proxy command line; staleness flags come from the job manifest it loads, the engines
    from the ConfigMap's engine list, which it follows while it runs (so the Deployment does
    not change, and its sessions survive, when `inference.replicas` does)."""
    return [
        "python",
        "-m",
        "dressage",
        "proxy",
        "--config",
        naming.CONFIG_PATH,
        "--host",
        "0.0.0.0",
        "--port",
        str(naming.PROXY_PORT),
        "--engine-urls-file",
        naming.ENGINES_PATH,
        "--model",
        proxy_model(job),
    ]


def build_proxy_deployment(job: AsyncRLJob, owner: Owner, config: OperatorConfig) -> Obj:
    proxy = job.spec.proxy
    name = naming.proxy(owner.name)
    container: Obj = {
        "name": "proxy",
        "image": proxy.image or config.runtime_image,
        "command": proxy_command(job, owner),
        "env": container_env(
            {"DRESSAGE_JOB_CONFIG": naming.CONFIG_PATH}, proxy.template, proxy_token_env(job)
        ),
        "ports": [{"name": "http", "containerPort": naming.PROXY_PORT}],
        "resources": container_resources(proxy.resources, 0, DEFAULT_REQUESTS["proxy"]),
        "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
    }
    # Kueue's Deployment integration reads the queue from the Deployment, its pod
    # integration from each pod: both carry it.
    queue = queue_labels(job)
    pod_meta = template_meta(
        {"labels": object_meta(job, owner, name, naming.ROLE_PROXY, **queue)["labels"]},
        proxy.template,
    )
    pod_meta.setdefault("annotations", {})[naming.ANNOTATION_ROLE_SPEC] = proxy_spec_hash(job)
    return finish(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": object_meta(job, owner, name, naming.ROLE_PROXY, **queue),
            "spec": {
                "replicas": proxy.replicas,
                # Sessions live in the proxy's memory: a rolling update would run an old and a
                # new proxy side by side behind the Service and split sessions between them.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": naming.selector(owner.name, naming.ROLE_PROXY)},
                "template": {
                    "metadata": pod_meta,
                    "spec": pod_spec(job, owner, config, proxy.template, container, "Always"),
                },
            },
        }
    )
