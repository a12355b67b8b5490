"""What the operator needs to know about a child pod, read from its body (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dressage_operator import naming


@dataclass(frozen=True)
class PodInfo:
    """A summary of one pod of a job, as kept in the operator's in-memory index."""

    name: str
    uid: str
    role: str
    index: int
    gang: int
    phase: str
    """Kubernetes pod phase: Pending, Running, Succeeded, Failed or Unknown."""
    ready: bool
    terminating: bool
    reason: str = ""
    """Why the pod failed, when it did (pod reason or container termination reason)."""
    owner_uid: str = ""
    """uid of the job in the pod's controller owner reference: a pod left by an earlier job
    of the same name carries that job's uid."""
    role_spec: str = ""
    """The pod's `naming.ANNOTATION_ROLE_SPEC`: what part of the spec it runs ("" if none)."""
    disruption: str = ""
    """Why someone else than the operator is terminating the pod (`disruption`): a
    preemption or an eviction, "" when nothing says so."""

    @property
    def failed(self) -> bool:
        return self.phase == "Failed"

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"


def _int(value: object, default: int = 0) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def failure_reason(status: Mapping[str, Any]) -> str:
    """The most specific reason a pod failed: a container's termination, else the pod's."""
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or {}
        if terminated and terminated.get("exitCode", 0) != 0:
            reason = terminated.get("reason") or "Error"
            return f"{cs.get('name', 'container')}: {reason} (exit code {terminated['exitCode']})"
    return str(status.get("reason") or status.get("message") or "")


PREEMPTION_CONDITIONS = ("DisruptionTarget", "TerminationTarget")
"""Pod conditions that say why a pod is being terminated: Kubernetes' `DisruptionTarget`
(preemption by the scheduler, an eviction, a taint, the kubelet) and Kueue's
`TerminationTarget` (Kueue stopping the pod's Workload: preempted or evicted)."""


def disruption(conditions: list[Mapping[str, Any]]) -> str:
    """`<type>: <reason>` of a true `PREEMPTION_CONDITIONS` condition (for example
    `TerminationTarget: Preempted` when Kueue preempts the pod's Workload), "" when none says
    so. The seam for draining a preempted pod instead of counting it as lost (the operator
    names it in the gang restart's message for now)."""
    for condition in conditions:
        kind = condition.get("type")
        if kind in PREEMPTION_CONDITIONS and condition.get("status") == "True":
            return f"{kind}: {condition.get('reason') or 'no reason given'}"
    return ""


def pod_info(body: Mapping[str, Any]) -> PodInfo | None:
    """Summarise a pod body; None when it is not a Dressage child."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    role = labels.get(naming.LABEL_ROLE)
    if not labels.get(naming.LABEL_JOB) or role not in (
        naming.ROLE_TRAINER,
        naming.ROLE_INFERENCE,
    ):
        return None
    status = body.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    conditions = status.get("conditions") or []
    ready = phase == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )
    return PodInfo(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        role=str(role),
        index=_int(labels.get(naming.LABEL_INDEX)),
        gang=_int(labels.get(naming.LABEL_GANG)),
        phase=phase,
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
        reason=failure_reason(status) if phase == "Failed" else "",
        owner_uid=controller_uid(meta),
        role_spec=str((meta.get("annotations") or {}).get(naming.ANNOTATION_ROLE_SPEC, "")),
        disruption=disruption(conditions),
    )


def controller_uid(meta: Mapping[str, Any]) -> str:
    """The uid of an object's controller owner reference, "" when it has none."""
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("uid", ""))
    return ""
