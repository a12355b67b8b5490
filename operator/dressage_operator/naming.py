"""Deterministic names, labels and ports of a job's children.

Every child is named after its job, so reconciling twice (or after an operator restart) finds
the same objects instead of creating duplicates.
"""

from __future__ import annotations

from typing import Final

LABEL_JOB: Final = "dressage.io/job"
LABEL_ROLE: Final = "dressage.io/role"
LABEL_INDEX: Final = "dressage.io/index"
LABEL_GANG: Final = "dressage.io/gang"
"""On trainer pods: the gang restart number that created the pod (`status.restarts`)."""
ANNOTATION_HASH: Final = "dressage.io/spec-hash"
"""Hash of the desired object the child was last written from: drift shows as a mismatch."""
ANNOTATION_ROLE_SPEC: Final = "dressage.io/role-spec-hash"
"""On trainer and engine pods and the proxy's pod template: hash of what the role's pods run
from the job's spec (`children.restart`: `trainer_inputs`, `engine_inputs`, `proxy_inputs`).
Pods are not patched: a pod whose hash differs from the job's is replaced (the trainer gang
together, engines one by one, the proxy through its Deployment)."""
MANAGED_BY: Final = "dressage-operator"

ROLE_TRAINER: Final = "trainer"
ROLE_INFERENCE: Final = "inference"
ROLE_PROXY: Final = "proxy"
ROLE_CONFIG: Final = "config"

RENDEZVOUS_PORT: Final = 29500
"""torch.distributed rendezvous port of trainer rank 0."""
WEIGHT_SYNC_PORT_NAME: Final = "weight-sync"
"""Name of the weight-update group's port on the trainer pods and their Service (the number
is `spec.inference.weightSyncPort`)."""
METRICS_PORT: Final = 9400
"""Prometheus `/metrics` port of the trainer pods (the operator scrapes rank 0)."""
ENGINE_PORT: Final = 30000
"""SGLang HTTP port."""
PROXY_PORT: Final = 8000
"""Rollout proxy HTTP port (generate, chat completions, `/metrics`)."""
CONFIG_DIR: Final = "/etc/dressage"
CONFIG_KEY: Final = "job.yaml"
CONFIG_PATH: Final = f"{CONFIG_DIR}/{CONFIG_KEY}"
ENGINES_KEY: Final = "engines"
"""ConfigMap key listing the job's engine URLs, one per line: the proxy's `--engine-urls-file`
(the kubelet updates the mounted file when `inference.replicas` changes)."""
ENGINES_PATH: Final = f"{CONFIG_DIR}/{ENGINES_KEY}"


def config_map(job: str) -> str:
    return f"{job}-config"


def trainer_service(job: str) -> str:
    return f"{job}-trainer"


def trainer_pod(job: str, index: int) -> str:
    return f"{job}-trainer-{index}"


def engine_service(job: str) -> str:
    return f"{job}-engine"


def engine_pod(job: str, index: int) -> str:
    return f"{job}-engine-{index}"


def proxy(job: str) -> str:
    """Name of the proxy Deployment and of its Service."""
    return f"{job}-proxy"


def network_policy(job: str) -> str:
    """Name of the NetworkPolicy guarding the job's engines and proxy."""
    return f"{job}-serving"


def trainer_host(job: str, namespace: str, index: int) -> str:
    """DNS name of one trainer pod through the headless trainer Service."""
    return f"{trainer_pod(job, index)}.{trainer_service(job)}.{namespace}.svc"


def engine_url(job: str, namespace: str, index: int) -> str:
    """URL of one SGLang engine through the headless engine Service."""
    return f"http://{engine_pod(job, index)}.{engine_service(job)}.{namespace}.svc:{ENGINE_PORT}"


def proxy_url(job: str, namespace: str) -> str:
    """The proxy's ClusterIP Service: any replica (what is not bound to a session)."""
    return f"http://{proxy(job)}.{namespace}.svc:{PROXY_PORT}"


def proxy_replicas_service(job: str) -> str:
    """Name of the headless Service whose A records are the job's ready proxy pods."""
    return f"{job}-proxy-replicas"


def proxy_urls(job: str, namespace: str, replicas: int) -> str:
    """What the trainer's proxy client and the engines' drain hook are given as the proxy
    (`DRESSAGE_PROXY_URL`): one replica, the ClusterIP Service; several, `dns+http://` of the
    headless Service, every ready proxy pod by its address (`dressage.proxy.affinity`)."""
    if replicas == 1:
        return proxy_url(job, namespace)
    return f"dns+http://{proxy_replicas_service(job)}.{namespace}.svc:{PROXY_PORT}"


def metrics_url(job: str, namespace: str) -> str:
    """Default scrape target: the `/metrics` endpoint of trainer rank 0."""
    return f"http://{trainer_host(job, namespace, 0)}:{METRICS_PORT}/metrics"


def selector(job: str, role: str) -> dict[str, str]:
    """Labels that select one role's pods of one job."""
    return {LABEL_JOB: job, LABEL_ROLE: role}


def selector_string(job: str, role: str) -> str:
    """`selector` serialized as a label selector string (`key=value,...`), as the scale
    subresource's `status.selector` carries it."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector(job, role).items()))
