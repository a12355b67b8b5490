"""The plumbing every pod of a job shares: metadata, owner, hashes, volumes, security, staging."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from dressage.api.job import (
    API_GROUP,
    API_VERSION,
    KIND,
    STAGED_MODELS_DIR,
    AsyncRLJob,
    PodSecurityContext,
    PodSecuritySpec,
    PodTemplateOverrides,
    ResourceRequirements,
)
from dressage_operator import naming
from dressage_operator.children.scheduling import priority_class_name
from dressage_operator.config import OperatorConfig

Obj = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
STAGE_MODEL_CONTAINER = "stage-model"
STAGING_TOKEN_ENV = "HF_TOKEN"
"""What `dressage stage-model` reads the Hugging Face token from (`dressage.model.staging`)."""


@dataclass(frozen=True)
class Owner:
    """Identity of the job object that owns the children."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> Obj:
        return {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def spec_hash(obj: Obj) -> str:
    """A short stable hash of a desired object's content (metadata annotations excluded)."""
    content = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    content["labels"] = obj.get("metadata", {}).get("labels", {})
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def object_meta(job: AsyncRLJob, owner: Owner, name: str, role: str, **labels: str) -> Obj:
    """A child's metadata: the job's labels, the recommended `app.kubernetes.io` ones, the
    role's selector labels and `labels`, and the owner reference to the job."""
    all_labels = {
        **job.metadata.labels,
        "app.kubernetes.io/name": "dressage",
        "app.kubernetes.io/instance": owner.name,
        "app.kubernetes.io/component": role,
        "app.kubernetes.io/managed-by": naming.MANAGED_BY,
        **naming.selector(owner.name, role),
        **labels,
    }
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": all_labels,
        "ownerReferences": [owner.reference()],
    }


def with_role_spec(pod: Obj, value: str) -> Obj:
    """Annotate a pod with the hash of what its role runs (`children.restart`)."""
    pod["metadata"]["annotations"][naming.ANNOTATION_ROLE_SPEC] = value
    return pod


def finish(obj: Obj) -> Obj:
    """Annotate a complete child with the hash of its desired content (`spec_hash`)."""
    obj["metadata"].setdefault("annotations", {})[naming.ANNOTATION_HASH] = spec_hash(obj)
    return obj


COMPUTE_RESOURCES = ("cpu", "memory")
"""What a namespace's compute ResourceQuota makes every container and init container declare
(the quota's admission refuses a pod without it): each container the operator creates has a
request for both, from the role's `resources` or `DEFAULT_REQUESTS`."""
DEFAULT_REQUESTS: dict[str, dict[str, str]] = {
    "trainer": {"cpu": "1", "memory": "2Gi"},
    "sglang": {"cpu": "1", "memory": "4Gi"},
    "embedded": {"cpu": "1", "memory": "2Gi"},
    "proxy": {"cpu": "250m", "memory": "512Mi"},
}
"""What a main container requests of a compute resource its role's `resources` names neither a
request nor a limit of: enough to schedule and to count against a quota, not a size (a GPU
job's trainer and SGLang engines want their own). With only a limit, the API server makes the
request equal to it. Keyed by the container: `trainer`, `sglang`, `embedded` (an embedded
engine: one core for its forward passes, room for a small model, its KV cache and torch),
`proxy`."""
INIT_RESOURCES = ("cpu", "memory", "ephemeral-storage")
"""What an init container takes of its pod's main container's requests and limits
(`init_container_resources`)."""


def container_resources(
    res: ResourceRequirements, gpus: int, defaults: dict[str, str] | None = None
) -> Obj:
    """A container's `resources`: the role's requests and limits, plus `gpus` GPUs unless the
    role names a GPU count itself, plus the `defaults` requests of the compute resources the
    role names neither a request nor a limit of."""
    requests = dict(res.requests)
    limits = dict(res.limits)
    if gpus > 0:
        limits.setdefault(GPU_RESOURCE, str(gpus))
        requests.setdefault(GPU_RESOURCE, limits[GPU_RESOURCE])
    for key, value in (defaults or {}).items():
        if key not in limits:
            requests.setdefault(key, value)
    out: Obj = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def init_container_resources(main: Obj) -> Obj:
    """An init container's `resources`: the main container's requests and limits of cpu,
    memory and ephemeral storage (never a GPU). A pod asks the scheduler and a quota for the
    larger of its init containers and the sum of its containers, and the init containers run
    before the main one, so the pod asks no more than the main container does; a quota that
    limits `limits.cpu` finds a limit on the init containers whenever the role gives one."""
    out: Obj = {}
    for kind in ("requests", "limits"):
        kept = {k: v for k, v in (main.get(kind) or {}).items() if k in INIT_RESOURCES}
        if kept:
            out[kind] = kept
    return out


def job_volumes(job: AsyncRLJob, owner: Owner) -> tuple[list[Obj], list[Obj]]:
    """The volumes every pod of the job mounts (config, storage, shared memory) and the main
    container's mounts of them."""
    storage = job.spec.storage
    # Without a claim (allowed only for a one-node trainer with distributed weight sync, see
    # `validation.cluster_errors`) every pod has storage of its own: the staged model, and on the
    # trainer the checkpoints, for as long as the pod lives.
    if storage.persistent_volume_claim:
        storage_volume: Obj = {
            "name": "storage",
            "persistentVolumeClaim": {"claimName": storage.persistent_volume_claim},
        }
    else:
        storage_volume = {"name": "storage", "emptyDir": {}}
    volumes = [
        {"name": "config", "configMap": {"name": naming.config_map(owner.name)}},
        storage_volume,
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    mounts: list[Obj] = [
        {"name": "config", "mountPath": naming.CONFIG_DIR, "readOnly": True},
        {"name": "storage", "mountPath": storage.mount_path},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    return volumes, mounts


def model_path(job: AsyncRLJob) -> str:
    """Where every pod of the job reads the initial model: the staged copy of a hub id on the
    job's storage, else `spec.model.source` itself."""
    return job.spec.model.staged_path(job.spec.storage.mount_path)


def staging_init_containers(job: AsyncRLJob, config: OperatorConfig) -> list[Obj]:
    """The `stage-model` init container of a pod that reads the model; none when the source
    is a path or a built-in. It runs the trainer's image (a Dressage runtime image, also on
    engine pods whose SGLang image lacks Dressage) and mounts only the job's storage; the
    Hugging Face token comes from `spec.model.tokenSecret` and reaches no other container."""
    spec = job.spec
    model = spec.model
    if not model.is_hub_id:
        return []
    command = [
        "python",
        "-m",
        "dressage",
        "stage-model",
        "--source",
        model.source,
        "--dest",
        model_path(job),
    ]
    if model.revision:
        command += ["--revision", model.revision]
    mount = spec.storage.mount_path.rstrip("/")
    # The hub client's own cache and lock files go to the shared storage too: the image's
    # home directory may not exist for the pods' user.
    env: list[Obj] = [{"name": "HF_HOME", "value": f"{mount}/{STAGED_MODELS_DIR}/.hf-home"}]
    if model.hub_offline:
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    if model.token_secret is not None:
        env.append(
            {
                "name": STAGING_TOKEN_ENV,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": model.token_secret.name,
                        "key": model.token_secret.key,
                    }
                },
            }
        )
    return [
        {
            "name": STAGE_MODEL_CONTAINER,
            "image": spec.trainer.image or config.runtime_image,
            "command": command,
            "env": env,
            "volumeMounts": [{"name": "storage", "mountPath": spec.storage.mount_path}],
        }
    ]


PROXY_TOKEN_ENV = "DRESSAGE_PROXY_TOKEN"
"""What `dressage proxy` and `dressage train` read the proxy's bearer token from."""


def proxy_token_env(job: AsyncRLJob) -> list[Obj]:
    """`DRESSAGE_PROXY_TOKEN` from `spec.proxy.tokenSecret`, for the proxy and the trainer
    pods only (engines never see it); nothing when the proxy is open."""
    secret = job.spec.proxy.token_secret
    if secret is None:
        return []
    ref = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": PROXY_TOKEN_ENV, "valueFrom": ref}]


def container_env(
    pairs: dict[str, str], template: PodTemplateOverrides, secrets: list[Obj] | None = None
) -> list[Obj]:
    """A container's `env`: the operator's variables, then secret references, then the
    role's `template.env` (which the job model keeps off the operator's names)."""
    env = [{"name": k, "value": v} for k, v in pairs.items()]
    env += secrets or []
    env += [{"name": e.name, "value": e.value} for e in template.env]
    return env


def pod_security_context(
    security: PodSecuritySpec, overrides: PodSecurityContext | None = None
) -> Obj:
    """The pod's security context: the Restricted Pod Security Standard's pod-level settings
    unless the role is relaxed to `baseline` (then the image's own user), with the fields the
    role's `template.securityContext` sets in place of the operator's (the job model admits
    only those the Restricted standard allows). The kubelet makes the job's storage
    group-owned by `fsGroup` so the pods' user can write it (by default only on a mismatch: a
    large claim is not walked at every start)."""
    context: Obj = {
        "fsGroup": security.fs_group,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if security.profile == "restricted":
        context.update(runAsNonRoot=True, runAsUser=security.run_as_user)
    if overrides is not None:
        context.update(overrides.to_wire())
        if not overrides.supplemental_groups:
            context.pop("supplementalGroups", None)
    return context


def container_security_context(security: PodSecuritySpec, with_capabilities: bool = True) -> Obj:
    """A container's security context: no privilege escalation and every capability dropped
    (`restricted`), plus the role's `addCapabilities` on the main container."""
    add = sorted(security.add_capabilities) if with_capabilities else []
    if security.profile == "restricted":
        capabilities: Obj = {"drop": ["ALL"]}
        if add:
            capabilities["add"] = add
        return {"allowPrivilegeEscalation": False, "capabilities": capabilities}
    return {"capabilities": {"add": add}} if add else {}


def pod_spec(
    job: AsyncRLJob,
    owner: Owner,
    config: OperatorConfig,
    template: PodTemplateOverrides,
    container: Obj,
    restart_policy: str,
) -> Obj:
    """The pod spec around a role's main `container`: the job's volumes, the pod security
    settings, model staging and the role's `template` overrides. Fills in the container's
    mounts and security context."""
    volumes, mounts = job_volumes(job, owner)
    container["volumeMounts"] = mounts + list(template.volume_mounts)
    spec: Obj = {
        "restartPolicy": restart_policy,
        "containers": [container],
        "volumes": volumes + list(template.volumes),
        "enableServiceLinks": False,
        "securityContext": pod_security_context(template.security, template.security_context),
        # The job's pods never talk to the Kubernetes API.
        "automountServiceAccountToken": False,
    }
    container["securityContext"] = container_security_context(template.security)
    init = staging_init_containers(job, config)
    for init_container in init:
        init_container["resources"] = init_container_resources(container.get("resources", {}))
        init_container["securityContext"] = container_security_context(
            template.security, with_capabilities=False
        )
    if init:
        spec["initContainers"] = init
    if template.node_selector:
        spec["nodeSelector"] = dict(template.node_selector)
    if template.tolerations:
        spec["tolerations"] = list(template.tolerations)
    if template.affinity:
        spec["affinity"] = dict(template.affinity)
    priority = priority_class_name(job, template)
    if priority:
        spec["priorityClassName"] = priority
    if template.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in template.image_pull_secrets]
    return spec


def template_meta(meta: Obj, template: PodTemplateOverrides) -> Obj:
    """Pod metadata with the role's `template` labels (the operator's win) and annotations."""
    meta["labels"] = {**template.labels, **meta["labels"]}
    if template.annotations:
        meta["annotations"] = dict(template.annotations)
    return meta
