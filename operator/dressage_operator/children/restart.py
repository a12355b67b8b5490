"""The restart policy: what each role's pods run from the job's spec, as one hash per role.

A pod carries the hash of its role's inputs (`naming.ANNOTATION_ROLE_SPEC`); a pod whose hash
differs from the job's is replaced: the trainer gang together, engines one by one, the proxy
through its Deployment. Inputs are the fields that differ from their defaults, so a field added
to the model later, with a default, restarts nothing at an upgrade.

Each hash is computed from the job on every call (no cache): a builder computes its role's
hash once for all the pods it builds, and `decide` once per cycle.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from dressage.api.job import AsyncRLJob
from dressage.api.proxy_settings import proxy_settings


def short_hash(content: object) -> str:
    """16 hex digits of the SHA-256 of `content` as canonical JSON."""
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


NOT_READ_BY_PODS = (
    "suspend",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "failurePolicy",
    "local",
)
"""Spec fields only the operator acts on: changing them replaces no pod."""
NOT_RUN_BY_ENGINES = ("replicas", "autoscaling", "weightUpdateTimeoutSeconds")
"""Fields of `spec.inference` that no engine runs: how many there are, the autoscaler's
bounds (a change of either adds or removes engines, it replaces none) and the trainer's
timeout."""
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
    if job.spec.proxy.replicas > 1:
        wire["proxy"]["replicated"] = True  # the proxy address (`naming.proxy_urls`) changes
    return wire


def engine_inputs(job: AsyncRLJob) -> dict[str, Any]:
    """What an engine pod runs from the job's spec: `spec.inference` (image, resources, tensor
    parallelism, extra arguments, template; not `NOT_RUN_BY_ENGINES`), the model's dtype and
    tokenizer, the storage's mount path, whether the engines return routed experts
    (`spec.rollout.routingReplay` not `off`), an embedded engine's seed (`spec.training.seed`)
    and the job's queue and priority (`spec.scheduling`)."""
    wire = _set_fields(job.spec.inference)
    inputs = {k: v for k, v in wire.items() if k not in NOT_RUN_BY_ENGINES}
    model = job.spec.model
    inputs["model"] = {"dtype": model.dtype, "tokenizer": model.tokenizer}
    inputs["mountPath"] = job.spec.storage.mount_path
    if job.spec.proxy.replicas > 1:
        inputs["proxyReplicated"] = True  # the drain hook's proxy address changes
    if job.spec.rollout.routing_replay != "off":
        # Only when on, so that the engines of jobs without it keep their hash.
        inputs["returnRoutedExperts"] = True
    if job.spec.inference.engine == "embedded":
        # The embedded engine's command carries its sampling seed (SGLang's does not).
        inputs["seed"] = job.spec.training.seed
    scheduling = _set_fields(job.spec.scheduling)
    if scheduling:
        # Only when set: a job without it keeps its engines' hash across an upgrade.
        inputs["scheduling"] = scheduling
    return inputs


def proxy_inputs(job: AsyncRLJob) -> dict[str, Any]:
    """What the proxy reads from `job.yaml`: `dressage.api.proxy_settings`, the very function
    `dressage proxy --config` takes its defaults from. A change restarts the proxy through its
    Deployment, as the file is read at start."""
    return dict(proxy_settings(job))


def trainer_spec_hash(job: AsyncRLJob) -> str:
    """A change restarts the trainer gang from its checkpoint (`trainer_inputs`)."""
    return short_hash(trainer_inputs(job))


def engine_spec_hash(job: AsyncRLJob) -> str:
    """A change replaces the engines one by one (`engine_inputs`)."""
    return short_hash(engine_inputs(job))


def proxy_spec_hash(job: AsyncRLJob) -> str:
    """A change restarts the proxy (`proxy_inputs`)."""
    return short_hash(proxy_inputs(job))
