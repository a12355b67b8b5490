"""The scheduler's part of the test kubelet: whether a pod fits the emulated node, and what
kube-scheduler writes when it does not (pure but for the API reads).

A pod the scheduler cannot place stays Pending with condition `PodScheduled` False, reason
`Unschedulable`, and the message of `FitError.Error()` (kubernetes/kubernetes v1.33,
pkg/scheduler/framework/types.go: `0/<nodes> nodes are available:` then the PreFilter
plugin's message, or the Filter plugins' reasons counted per node, then the PostFilter
(preemption) message, each as ` %v.`). Two plugins are emulated:
- VolumeBinding (pkg/scheduler/framework/plugins/volumebinding): a claim that does not exist
  (`persistentvolumeclaim "x" not found`, the lister's NotFound) or is not Bound (`pod has
  unbound immediate PersistentVolumeClaims`), checked only when the node reads claims from
  the API (`Node.claims_from_api`; otherwise every claim is a directory, as provisioned);
- NodeResourcesFit (pkg/scheduler/framework/plugins/noderesources/fit.go): `Insufficient
  <resource>` for each resource the node's `allocatable` names that the pod's requests
  (the sum of its containers', or its largest init container's) exceed beside the pods
  already placed. Resources the node does not name are unlimited.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from dressage_operator.quantity import parse_quantity
from dressage_testkit.kube import EmulatedCluster

Obj = dict[str, Any]
NODES = 1
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
"""DefaultPreemption's answers (pkg/scheduler/framework/preemption): no pod of lower priority
to evict would make room, or the failure is one preemption cannot solve."""


def fit_error(pre_filter: str = "", filtered: Iterable[str] = (), preemption: str = "") -> str:
    """`FitError.Error()` for the one emulated node."""
    message = f"0/{NODES} nodes are available:"
    if pre_filter:
        message += f" {pre_filter}."
    else:
        message += " " + ", ".join(sorted(f"{NODES} {r}" for r in filtered)) + "."
    return message + f" preemption: 0/{NODES} nodes are available: {NODES} {preemption}."


def pod_requests(manifest: Obj) -> dict[str, Decimal]:
    """What a pod requests: its containers' requests summed, or its largest init container's
    if more (`resource.PodRequests`); an extended resource named only in `limits` requests
    that much."""

    def of(container: Obj) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        named = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {k: parse_quantity(str(v)) or Decimal(0) for k, v in named.items()}

    spec = manifest["spec"]
    total: dict[str, Decimal] = {}
    for container in spec["containers"]:
        for name, value in of(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    return total


def claims(manifest: Obj) -> list[str]:
    """The claims a pod's volumes name."""
    volumes = manifest["spec"].get("volumes") or []
    return [
        v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v
    ]


def unschedulable(
    cluster: EmulatedCluster,
    manifest: Obj,
    allocatable: Mapping[str, str] | None,
    claims_from_api: bool,
    placed: Iterable[Obj],
) -> str | None:
    """The scheduler's message for a pod that does not fit the node beside the pods already
    `placed`, None when it fits (see the module docstring)."""
    if claims_from_api:
        found = {
            name: cluster.get(cluster.path("v1", "persistentvolumeclaims", name))
            for name in claims(manifest)
        }
        missing = [name for name, claim in found.items() if claim is None]
        if missing:
            return fit_error(f'persistentvolumeclaim "{missing[0]}" not found', (), NO_VICTIMS)
        if any(((c or {}).get("status") or {}).get("phase") != "Bound" for c in found.values()):
            return fit_error("pod has unbound immediate PersistentVolumeClaims", (), NOT_HELPFUL)
    if allocatable is None:
        return None
    used: dict[str, Decimal] = {}
    for other in placed:
        for name, value in pod_requests(other).items():
            used[name] = used.get(name, Decimal(0)) + value
    short = [
        f"Insufficient {name}"
        for name, value in pod_requests(manifest).items()
        if name in allocatable
        and value > 0
        and value + used.get(name, Decimal(0)) > (parse_quantity(allocatable[name]) or 0)
    ]
    return fit_error("", short, NO_VICTIMS) if short else None
