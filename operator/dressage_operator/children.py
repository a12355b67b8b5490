"""Pure builders of a job's child objects: `build_*(job, owner, config) -> dict`.

No I/O here: the handlers apply what these functions return. Each child carries the job's
labels, an owner reference to the job (so Kubernetes garbage-collects it with the job) and the
hash of its desired content (so drift is one string comparison).

Roles and how they are wired:
- trainer: one Pod per node, `<job>-trainer-<i>`, reachable as
  `<job>-trainer-<i>.<job>-trainer.<ns>.svc` through a headless Service; rank 0 is the
  torch.distributed master and serves the job's `/metrics` on port 9400.
- inference: one SGLang Pod per replica, `<job>-engine-<i>`, addressed individually through the
  headless `<job>-engine` Service (the proxy balances across them and health-checks them; a
  failed engine is replaced alone).
- proxy: a Deployment `<job>-proxy` behind a ClusterIP Service `<job>-proxy`.
- weight sync (`spec.inference.weightSync: distributed`): trainer rank 0 serves the
  weight-update group's rendezvous on `spec.inference.weightSyncPort` (declared on the trainer
  pods and their Service as `weight-sync`) at its stable name
  `<job>-trainer-0.<job>-trainer.<ns>.svc`; the trainer gets that address and port
  (`weight_sync_env`) and has each engine join at its rank offset, in engine order, over a
  group of 1 + replicas x tensorParallelSize ranks (`weight_sync_rendezvous`), NCCL between GPU
  pods with the NCCL environment of `NCCL_ENV`.
- config: a ConfigMap `<job>-config` with the job manifest (`job.yaml`) the runtime loads with
  `dressage.api.load_job`, and the engine URLs (`engines`) the proxy follows while the job runs:
  a change of `inference.replicas` creates or deletes engine pods and rewrites that list, the
  proxy takes up the list, and the trainer's weight publisher, which reads the engine set from
  the proxy, brings each new engine to the current weight version before the proxy routes to
  it.
- model staging: when `spec.model.source` is a Hugging Face id, every pod that reads the model
  (trainer, engines, proxy) starts with a `stage-model` init container that downloads it once
  onto the job's storage (`ModelSpec.staged_path`); the token Secret reaches only that init
  container. `dressage stage-model` is atomic and a no-op once staged, so the pods can race.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from dressage.api.job import (
    API_GROUP,
    API_VERSION,
    KIND,
    PACKAGES_DIR,
    STAGED_MODELS_DIR,
    AsyncRLJob,
    ObjectMeta,
    PodSecuritySpec,
    PodTemplateOverrides,
    ResourceRequirements,
)
from dressage.data.versions import INITIAL_VERSION
from dressage_operator import naming, sglang_release
from dressage_operator.config import OperatorConfig

Obj = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
ENGINE_HOME = "/home/dressage"
"""The engines' `HOME`, an emptyDir: SGLang and its kernels cache there, and the SGLang image
has no home directory for the non-root user the pods run as."""
STAGE_MODEL_CONTAINER = "stage-model"
STAGING_TOKEN_ENV = "HF_TOKEN"
"""What `dressage stage-model` reads the Hugging Face token from (`dressage.model.staging`)."""
INITIAL_WEIGHT_VERSION = INITIAL_VERSION
"""Weight version the engines report before the trainer publishes any: the trainer's own label
of its initial weights (`dressage.data.versions`), so a fresh engine is never mistaken for a
newer version than the trainer's."""
BASE_WEIGHT_VERSION = "base"
"""Weight version of an engine's staged base model when the trainer warm-starts from other
weights: a label the trainer never issues, so the proxy holds such an engine out until the
weight publisher gave it the trainer's current version."""


def engine_base_version(job: AsyncRLJob) -> str:
    """The label of the weights an engine pod starts on: the trainer's `v0` when those are the
    trainer's initial weights (no warm start), else `base`."""
    return INITIAL_WEIGHT_VERSION if job.spec.model.warm_start is None else BASE_WEIGHT_VERSION


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


def _meta(job: AsyncRLJob, owner: Owner, name: str, role: str, **labels: str) -> Obj:
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


def _short_hash(content: object) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


NOT_READ_BY_PODS = (
    "suspend",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "failurePolicy",
    "local",
)
"""Spec fields only the operator acts on: changing them replaces no pod."""
POD_ONLY = ("replicas", "image", "resources", "template")
"""Fields of `spec.proxy` that shape only the proxy's own pods."""


def _set_fields(model: BaseModel) -> dict[str, Any]:
    """The fields that differ from their defaults: a field added to the model later, with a
    default, leaves the hash of every running job as it was (no restart at an upgrade), and a
    field set to its default is the same as one left unset."""
    return model.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def trainer_inputs(job: AsyncRLJob) -> dict[str, Any]:
    """What a trainer gang runs from the job's spec: `spec.trainer` (nodes, GPUs, image,
    resources, template) and everything `dressage train` reads from `job.yaml` (model but its
    token Secret, task, rollout, training, staleness, storage, the proxy's training flags, the
    engines' weight update timeout). Not the engines' or the proxy's pods, nor how many
    engines there are."""
    wire = _set_fields(job.spec)
    for key in NOT_READ_BY_PODS:
        wire.pop(key, None)
    wire["model"].pop("tokenSecret", None)  # read only by the stage-model init container
    inference: dict[str, Any] = wire.pop("inference", {})
    wire["inference"] = {"weightUpdateTimeoutSeconds": inference.get("weightUpdateTimeoutSeconds")}
    proxy: dict[str, Any] = wire.get("proxy", {})
    wire["proxy"] = {k: v for k, v in proxy.items() if k not in POD_ONLY}
    return wire


def engine_inputs(job: AsyncRLJob) -> dict[str, Any]:
    """What an engine pod runs from the job's spec: `spec.inference` (image, resources, tensor
    parallelism, extra arguments, template; not the engine count or the trainer's weight
    update timeout), the model's dtype and tokenizer, and the storage's mount path."""
    wire = _set_fields(job.spec.inference)
    inputs = {k: v for k, v in wire.items() if k not in ("replicas", "weightUpdateTimeoutSeconds")}
    model = job.spec.model
    inputs["model"] = {"dtype": model.dtype, "tokenizer": model.tokenizer}
    inputs["mountPath"] = job.spec.storage.mount_path
    return inputs


def proxy_inputs(job: AsyncRLJob) -> dict[str, Any]:
    """What the proxy reads from `job.yaml` (`dressage.proxy.config.defaults_from_job`): a
    change restarts the proxy through its Deployment, as the file is read at start."""
    spec = job.spec
    return {
        "partialRollout": spec.partial_rollout,
        "recordTokenVersions": spec.proxy.record_token_versions,
        "maxPartialRolloutPreempts": spec.staleness.max_partial_rollout_preempts,
        "maxConcurrency": spec.proxy.max_concurrency,
        "model": [spec.model.tokenizer, spec.model.source],
    }


_MEMO: dict[tuple[str, int], tuple[AsyncRLJob, str]] = {}
_MEMO_SIZE = 512


def _memo(kind: str, job: AsyncRLJob, compute: Callable[[AsyncRLJob], str]) -> str:
    """`compute(job)`, once per job object: a cycle asks for each hash once per pod it
    builds, and dumping a spec without its defaults is not cheap. The entry holds the job, so
    its id cannot be reused while it is cached."""
    key = (kind, id(job))
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is job:
        return hit[1]
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.clear()
    value = compute(job)
    _MEMO[key] = (job, value)
    return value


def trainer_spec_hash(job: AsyncRLJob) -> str:
    """A change restarts the trainer gang from its checkpoint (`trainer_inputs`)."""
    return _memo("trainer", job, lambda j: _short_hash(trainer_inputs(j)))


def engine_spec_hash(job: AsyncRLJob) -> str:
    """A change replaces the engines one by one (`engine_inputs`)."""
    return _memo("engine", job, lambda j: _short_hash(engine_inputs(j)))


def _role_spec(pod: Obj, value: str) -> Obj:
    pod["metadata"]["annotations"][naming.ANNOTATION_ROLE_SPEC] = value
    return pod


def _finish(obj: Obj) -> Obj:
    obj["metadata"].setdefault("annotations", {})[naming.ANNOTATION_HASH] = spec_hash(obj)
    return obj


def _resources(res: ResourceRequirements, gpus: int) -> Obj:
    requests = dict(res.requests)
    limits = dict(res.limits)
    if gpus > 0:
        limits.setdefault(GPU_RESOURCE, str(gpus))
        requests.setdefault(GPU_RESOURCE, limits[GPU_RESOURCE])
    out: Obj = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _volumes(job: AsyncRLJob, owner: Owner) -> tuple[list[Obj], list[Obj]]:
    storage = job.spec.storage
    # Without a claim (allowed only for a one-node trainer with distributed weight sync, see
    # `decide.cluster_errors`) every pod has storage of its own: the staged model, and on the
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


def proxy_model(job: AsyncRLJob) -> str:
    """The proxy's `--model` (its chat tokenizer reads `tokenizer.json` from it): a local
    `spec.model.tokenizer`, else the model directory; never a hub id (the job's validation
    refuses a hub-id tokenizer)."""
    return job.spec.model.tokenizer or model_path(job)


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
WEIGHT_SYNC_ADDRESS_ENV = "DRESSAGE_WEIGHT_SYNC_ADDRESS"
WEIGHT_SYNC_PORT_ENV = "DRESSAGE_WEIGHT_SYNC_PORT"
"""The weight-update group's rendezvous, as `dressage train` reads it."""
DEFAULT_WEIGHTS_GROUP = "weight_update_group"
"""SGLang's default group name, which the trainer uses (`dressage.engine.protocol`)."""
"""What `dressage proxy` and `dressage train` read the proxy's bearer token from."""


def proxy_token_env(job: AsyncRLJob) -> list[Obj]:
    """`DRESSAGE_PROXY_TOKEN` from `spec.proxy.tokenSecret`, for the proxy and the trainer
    pods only (engines never see it); nothing when the proxy is open."""
    secret = job.spec.proxy.token_secret
    if secret is None:
        return []
    ref = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": PROXY_TOKEN_ENV, "valueFrom": ref}]


def _env(
    pairs: dict[str, str], template: PodTemplateOverrides, secrets: list[Obj] | None = None
) -> list[Obj]:
    env = [{"name": k, "value": v} for k, v in pairs.items()]
    env += secrets or []
    env += [{"name": e.name, "value": e.value} for e in template.env]
    return env


def pod_security_context(security: PodSecuritySpec) -> Obj:
    """The pod's security context: the Restricted Pod Security Standard's pod-level settings
    unless the role is relaxed to `baseline` (then the image's own user). The kubelet makes the
    job's storage group-owned by `fsGroup` so the pods' user can write it (only on a mismatch:
    a large claim is not walked at every start)."""
    context: Obj = {
        "fsGroup": security.fs_group,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if security.profile == "restricted":
        context.update(runAsNonRoot=True, runAsUser=security.run_as_user)
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


def _pod_spec(
    job: AsyncRLJob,
    owner: Owner,
    config: OperatorConfig,
    template: PodTemplateOverrides,
    container: Obj,
    restart_policy: str,
) -> Obj:
    volumes, mounts = _volumes(job, owner)
    container["volumeMounts"] = mounts + list(template.volume_mounts)
    spec: Obj = {
        "restartPolicy": restart_policy,
        "containers": [container],
        "volumes": volumes + list(template.volumes),
        "enableServiceLinks": False,
        "securityContext": pod_security_context(template.security),
        # The job's pods never talk to the Kubernetes API.
        "automountServiceAccountToken": False,
    }
    container["securityContext"] = container_security_context(template.security)
    init = staging_init_containers(job, config)
    for init_container in init:
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
    if template.priority_class_name:
        spec["priorityClassName"] = template.priority_class_name
    if template.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in template.image_pull_secrets]
    return spec


def _template_meta(meta: Obj, template: PodTemplateOverrides) -> Obj:
    meta["labels"] = {**template.labels, **meta["labels"]}
    if template.annotations:
        meta["annotations"] = dict(template.annotations)
    return meta


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
    return _finish(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(job, owner, naming.config_map(owner.name), naming.ROLE_CONFIG),
            "data": {
                naming.CONFIG_KEY: runtime_manifest(job, owner),
                naming.ENGINES_KEY: "".join(f"{url}\n" for url in engine_urls(job, owner)),
            },
        }
    )


def _headless_service(job: AsyncRLJob, owner: Owner, name: str, role: str, ports: list[Obj]) -> Obj:
    return _finish(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(job, owner, name, role),
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


def engine_urls(job: AsyncRLJob, owner: Owner) -> list[str]:
    """The URLs of the job's engine pods, `inference.replicas` of them by index."""
    replicas = job.spec.inference.replicas
    return [naming.engine_url(owner.name, owner.namespace, i) for i in range(replicas)]


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


def trainer_command(job: AsyncRLJob) -> list[str]:
    """The torchrun command line of one trainer node (env vars expanded by the kubelet)."""
    return [
        "torchrun",
        "--nnodes=$(NNODES)",
        "--nproc-per-node=$(NPROC_PER_NODE)",
        "--node-rank=$(NODE_RANK)",
        "--master-addr=$(MASTER_ADDR)",
        "--master-port=$(MASTER_PORT)",
        "-m",
        "dressage",
        "train",
        "--config",
        naming.CONFIG_PATH,
    ]


def trainer_env(job: AsyncRLJob, owner: Owner, index: int) -> dict[str, str]:
    """The rendezvous and wiring environment of trainer node `index`: torchrun reads the
    rendezvous variables through its command line, `dressage train` the `DRESSAGE_*` ones
    (`dressage.orchestrator.train_cli.ENV_VARS`)."""
    spec = job.spec
    nproc = max(spec.trainer.gpus_per_node, 1)
    return {
        "MASTER_ADDR": naming.trainer_host(owner.name, owner.namespace, 0),
        "MASTER_PORT": str(naming.RENDEZVOUS_PORT),
        "NNODES": str(spec.trainer.nodes),
        "NPROC_PER_NODE": str(nproc),
        "WORLD_SIZE": str(spec.trainer.nodes * nproc),
        "NODE_RANK": str(index),
        "DRESSAGE_ROLLOUT_MAX_RETRIES": str(spec.rollout.max_retries),
        "DRESSAGE_JOB_CONFIG": naming.CONFIG_PATH,
        # The engines at the pod's creation. Rank 0's disk publisher takes the engine set from
        # the proxy (it follows `inference.replicas`); the list serves what needs a fixed set.
        "DRESSAGE_ENGINE_URLS": ",".join(engine_urls(job, owner)),
        "DRESSAGE_PROXY_URL": naming.proxy_url(owner.name, owner.namespace),
        "DRESSAGE_METRICS_PORT": str(naming.METRICS_PORT),
        # The run directory on the job's storage: weights/<version>/ (which the engines load
        # from the same mount with disk sync), checkpoints/ and the model cache.
        "DRESSAGE_WORKDIR": f"{spec.storage.mount_path}/{owner.name}",
        **weight_sync_env(job, owner),
    }


INSTALL_PACKAGES_CONTAINER = "install-packages"
PACKAGES_VOLUME = "packages"


def code_env(job: AsyncRLJob) -> dict[str, str]:
    """What the trainer pods need to import the job's own code (`spec.code`): its directory on
    `PYTHONPATH` and, with packages, the user site they are installed in on `PYTHONUSERBASE`
    (which Python puts on `sys.path` ahead of the image's site-packages)."""
    code = job.spec.code
    env: dict[str, str] = {}
    directory = code.directory(job.spec.storage.mount_path)
    if directory is not None:
        env["PYTHONPATH"] = directory
    if code.packages:
        env["PYTHONUSERBASE"] = PACKAGES_DIR
    return env


def install_packages_command(job: AsyncRLJob) -> list[str]:
    """`pip install --user` of `spec.code.packages` (empty when there are none): with `--user`,
    requirements the image already satisfies (torch, transformers) are kept, not reinstalled."""
    code = job.spec.code
    if not code.packages:
        return []
    command = ["python", "-m", "pip", "install", "--user", "--no-cache-dir", "--no-input"]
    if code.index_url:
        command += ["--index-url", code.index_url]
    return [*command, *code.packages]


def _add_code(job: AsyncRLJob, container: Obj, spec: Obj) -> None:
    """Give a trainer pod `spec.code`: the `install-packages` init container (after model
    staging) and the emptyDir it installs into, mounted in both containers."""
    command = install_packages_command(job)
    if not command:
        return
    mount = {"name": PACKAGES_VOLUME, "mountPath": PACKAGES_DIR}
    spec["volumes"].append({"name": PACKAGES_VOLUME, "emptyDir": {}})
    container["volumeMounts"].append(mount)
    init = {
        "name": INSTALL_PACKAGES_CONTAINER,
        "image": container["image"],
        "command": command,
        "env": [{"name": "PYTHONUSERBASE", "value": PACKAGES_DIR}],
        "volumeMounts": [mount],
        "securityContext": container_security_context(
            job.spec.trainer.template.security, with_capabilities=False
        ),
    }
    spec["initContainers"] = [*spec.get("initContainers", []), init]


def build_trainer_pods(
    job: AsyncRLJob, owner: Owner, config: OperatorConfig, gang: int
) -> list[Obj]:
    """The trainer gang: one pod per node, created together, restarted together."""
    trainer = job.spec.trainer
    pods = []
    for index in range(trainer.nodes):
        name = naming.trainer_pod(owner.name, index)
        container: Obj = {
            "name": "trainer",
            "image": trainer.image or config.runtime_image,
            "command": trainer_command(job),
            "env": _env(
                {**trainer_env(job, owner, index), **code_env(job)},
                trainer.template,
                proxy_token_env(job),
            ),
            "ports": [
                {"name": "rendezvous", "containerPort": naming.RENDEZVOUS_PORT},
                {"name": "metrics", "containerPort": naming.METRICS_PORT},
                *(
                    [
                        {
                            "name": naming.WEIGHT_SYNC_PORT_NAME,
                            "containerPort": job.spec.inference.weight_sync_port,
                        }
                    ]
                    if distributed_sync(job)
                    else []
                ),
            ],
            "resources": _resources(trainer.resources, trainer.gpus_per_node),
        }
        meta = _meta(
            job,
            owner,
            name,
            naming.ROLE_TRAINER,
            **{naming.LABEL_INDEX: str(index), naming.LABEL_GANG: str(gang)},
        )
        spec = _pod_spec(job, owner, config, trainer.template, container, "Never")
        _add_code(job, container, spec)
        spec["hostname"] = name
        spec["subdomain"] = naming.trainer_service(owner.name)
        pod = _finish(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": _template_meta(meta, trainer.template),
                "spec": spec,
            }
        )
        pods.append(_role_spec(pod, trainer_spec_hash(job)))
    return pods


def engine_command(job: AsyncRLJob) -> list[str]:
    """The SGLang server command line; weights are updated over HTTP by the trainer, each
    update stamping a new version: `/update_weights_from_disk` from the job's storage, or
    `/init_weights_update_group` once and then `/update_weights_from_distributed` per bucket
    (the group's address comes with the request, so no flag changes)."""
    spec = job.spec
    cmd = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_path(job),
        "--tp-size",
        str(spec.inference.tensor_parallel_size),
        "--dtype",
        spec.model.dtype,
        "--host",
        "0.0.0.0",
        "--port",
        str(naming.ENGINE_PORT),
        "--weight-version",
        engine_base_version(job),
        "--enable-metrics",
    ]
    if spec.model.tokenizer:
        cmd += ["--tokenizer-path", spec.model.tokenizer]
    if spec.rollout.seeded_sampling:
        # The job model admits seededSampling only with a release that has the flag
        # (spec.inference.sglangVersion >= 0.5.3); 0.5.2's parser refuses it.
        cmd.append("--enable-deterministic-inference")
    return cmd + list(spec.inference.extra_args)


ENGINE_GENERATE_CHECK = sglang_release.ENGINE_GENERATE_CHECK
ENGINE_STARTUP_PERIOD_SECONDS = 10
ENGINE_STARTUP_FAILURES = 360
"""With the period: an hour for the model to load (the HTTP port opens only once the
scheduler has loaded it) before Kubernetes restarts the engine."""
ENGINE_GENERATE_TIMEOUT_SECONDS = 30
"""Above the generation check's own 20 s limit, so the probe sees its answer."""


def engine_probes(sglang_version: str) -> Obj:
    """The engine container's probes. The startup probe proves generation works (the model
    loaded and a token came back); liveness and readiness then use a route of that release
    that keeps answering while generation is paused and logs nothing
    (`sglang_release.engine_live_check`), so a weight update never makes Kubernetes restart an
    engine or mark it unready. The proxy does its own generation-aware health checks."""
    path = sglang_release.engine_live_check(sglang_version)
    live = {"httpGet": {"path": path, "port": "http"}, "timeoutSeconds": 5}
    return {
        "startupProbe": {
            "httpGet": {"path": ENGINE_GENERATE_CHECK, "port": "http"},
            "periodSeconds": ENGINE_STARTUP_PERIOD_SECONDS,
            "timeoutSeconds": ENGINE_GENERATE_TIMEOUT_SECONDS,
            "failureThreshold": ENGINE_STARTUP_FAILURES,
        },
        "livenessProbe": {**live, "periodSeconds": 10, "failureThreshold": 6},
        "readinessProbe": {**live, "periodSeconds": 10, "failureThreshold": 3},
    }


def build_engine_pod(job: AsyncRLJob, owner: Owner, config: OperatorConfig, index: int) -> Obj:
    """One SGLang engine; engines are independent and replaced one by one."""
    inference = job.spec.inference
    name = naming.engine_pod(owner.name, index)
    container: Obj = {
        "name": "sglang",
        "image": inference.image or config.sglang_image,
        "command": engine_command(job),
        "env": _env(
            {
                "DRESSAGE_JOB_CONFIG": naming.CONFIG_PATH,
                "HOME": ENGINE_HOME,
                **(NCCL_ENV if distributed_sync(job) and job.spec.trainer.gpus_per_node else {}),
            },
            inference.template,
        ),
        "ports": [{"name": "http", "containerPort": naming.ENGINE_PORT}],
        "resources": _resources(inference.resources, inference.tensor_parallel_size),
        **engine_probes(inference.sglang_version),
    }
    meta = _meta(job, owner, name, naming.ROLE_INFERENCE, **{naming.LABEL_INDEX: str(index)})
    spec = _pod_spec(job, owner, config, inference.template, container, "Always")
    spec["volumes"].append({"name": "home", "emptyDir": {}})
    container["volumeMounts"].append({"name": "home", "mountPath": ENGINE_HOME})
    spec["hostname"] = name
    spec["subdomain"] = naming.engine_service(owner.name)
    pod = _finish(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": _template_meta(meta, inference.template),
            "spec": spec,
        }
    )
    return _role_spec(pod, engine_spec_hash(job))


def build_engine_pods(job: AsyncRLJob, owner: Owner, config: OperatorConfig) -> list[Obj]:
    return [build_engine_pod(job, owner, config, i) for i in range(job.spec.inference.replicas)]


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
        "env": _env(
            {"DRESSAGE_JOB_CONFIG": naming.CONFIG_PATH}, proxy.template, proxy_token_env(job)
        ),
        "ports": [{"name": "http", "containerPort": naming.PROXY_PORT}],
        "resources": _resources(proxy.resources, 0),
        "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
    }
    pod_meta = _template_meta(
        {"labels": _meta(job, owner, name, naming.ROLE_PROXY)["labels"]}, proxy.template
    )
    pod_meta.setdefault("annotations", {})[naming.ANNOTATION_ROLE_SPEC] = _short_hash(
        proxy_inputs(job)
    )
    return _finish(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(job, owner, name, naming.ROLE_PROXY),
            "spec": {
                "replicas": proxy.replicas,
                # Sessions live in the proxy's memory: a rolling update would run an old and a
                # new proxy side by side behind the Service and split sessions between them.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": naming.selector(owner.name, naming.ROLE_PROXY)},
                "template": {
                    "metadata": pod_meta,
                    "spec": _pod_spec(job, owner, config, proxy.template, container, "Always"),
                },
            },
        }
    )


def build_proxy_service(job: AsyncRLJob, owner: Owner) -> Obj:
    return _finish(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(job, owner, naming.proxy(owner.name), naming.ROLE_PROXY),
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
    return _finish(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(job, owner, naming.network_policy(owner.name), naming.ROLE_CONFIG),
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
