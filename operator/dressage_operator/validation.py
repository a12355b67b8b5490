"""Validation of a job object as read from the API server (pure).

The job model's own checks, the CEL rules of the CRD (for API servers that skipped them) and
what a cluster cannot run although the model allows it (`dressage run` has none of these
limits). Beside it, `limits` refuses what asks more than this cluster's limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dressage.api.crd import MAX_JOB_NAME_LENGTH
from dressage.api.job import AsyncRLJob
from dressage.api.loader import JobValidationError, validate_job


def cluster_errors(job: AsyncRLJob) -> list[tuple[str, str]]:
    """What a valid job model still cannot do on a cluster, where the trainer, the engines and
    the proxy are separate pods (`dressage run` has none of these limits)."""
    errors: list[tuple[str, str]] = []
    errors += storage_errors(job)
    errors += embedded_engine_errors(job)
    model = job.spec.model
    tokenizer = model.tokenizer
    if tokenizer and type(model)(source=tokenizer).is_hub_id:
        errors.append(
            (
                "spec.model.tokenizer",
                f"{tokenizer!r} is a Hugging Face id; only spec.model.source is staged onto "
                "the job's storage and the proxy needs a local tokenizer.json: leave it unset "
                "to use the model's own tokenizer, or give a path on the job's storage",
            )
        )
    return errors


def embedded_engine_errors(job: AsyncRLJob) -> list[tuple[str, str]]:
    """What the embedded engine cannot do in a pod of its own: join an NCCL weight-update
    group. On a cluster it computes on CPU, so with distributed weight sync it meets a CPU
    trainer over gloo; a GPU trainer's group is NCCL (the job model refuses the other
    GPU-only settings with it: tensor parallelism, SGLang arguments, GPU resources)."""
    spec = job.spec
    gpus = spec.trainer.gpus_per_node
    if spec.inference.engine != "embedded" or spec.inference.weight_sync != "distributed":
        return []
    if gpus == 0:
        return []
    return [
        (
            "spec.inference.weightSync",
            f"'distributed' with spec.inference.engine 'embedded' and a GPU trainer "
            f"(spec.trainer.gpusPerNode {gpus}): the embedded engine pods join their "
            "weight-update groups over gloo on CPU, and a GPU trainer's groups are NCCL; set "
            "spec.trainer.gpusPerNode to 0, or spec.inference.weightSync to 'disk'",
        )
    ]


def storage_errors(job: AsyncRLJob) -> list[tuple[str, str]]:
    """What the job needs shared storage for. With disk weight sync the engines load every
    version from it; with distributed sync the weights go over the network and storage holds
    only the staged model and the checkpoints, which a one-node trainer may keep on its own
    pod (they then last as long as the pod). A trainer of several nodes shares its model cache
    and checkpoint directory between its pods, so it needs the claim either way."""
    spec = job.spec
    if spec.storage.persistent_volume_claim:
        return []
    field = "spec.storage.persistentVolumeClaim"
    if spec.inference.weight_sync == "disk":
        return [
            (
                field,
                "required on a cluster with spec.inference.weightSync 'disk': the trainer, the "
                "engines and the proxy are separate pods that share the model, the weights the "
                "trainer publishes and the checkpoints through it; name a ReadWriteMany "
                "PersistentVolumeClaim, or set spec.inference.weightSync to 'distributed' "
                "(then a one-node trainer may run without one, its checkpoints lasting only "
                "as long as its pod)",
            )
        ]
    if spec.model.lora is not None:
        return [
            (
                field,
                "required for a LoRA job (spec.model.lora): the engines load every version's "
                "adapter from the directory the trainer writes it to, whatever "
                "spec.inference.weightSync says; name a ReadWriteMany PersistentVolumeClaim",
            )
        ]
    if spec.trainer.nodes > 1:
        return [
            (
                field,
                f"required for a trainer of {spec.trainer.nodes} nodes (spec.trainer.nodes), "
                "even with spec.inference.weightSync 'distributed': its pods share the model "
                "cache and the checkpoint directory through it; name a ReadWriteMany "
                "PersistentVolumeClaim",
            )
        ]
    return []


def spec_errors(
    body: Mapping[str, Any], source: str
) -> tuple[AsyncRLJob | None, tuple[tuple[str, str], ...]]:
    """Validate a job object as read from the API server: the job model, the checks the CRD
    makes with CEL (for API servers that skipped them) and what a cluster cannot run
    (`cluster_errors`). Returns the job (None when the model refuses it) and every
    `(field, message)` at fault."""
    errors: list[tuple[str, str]] = []
    job = None
    try:
        job = validate_job(dict(body), source)
    except JobValidationError as exc:
        errors += exc.errors
    if job is not None:
        errors += cluster_errors(job)
    name = str((body.get("metadata") or {}).get("name", ""))
    if len(name) > MAX_JOB_NAME_LENGTH or not name[:1].isalpha():
        errors.append(
            (
                "metadata.name",
                f"must start with a letter and be at most {MAX_JOB_NAME_LENGTH} characters",
            )
        )
    return job, tuple(errors)
