"""What the Kubernetes API server refuses in the objects a job renders (pure).

A subset of the API server's validation: the rules for the fields a job sets through its
manifest (labels, annotations, template overrides, resources, volumes and mounts) and the ones
the operator fills in from them, each the upstream rule with its wording. `fields` holds the
field paths, the causes and apimachinery's string checks (label keys and values, DNS names,
env var names); `containers` volumes, mounts, resources and images
(`pkg/apis/core/validation/validation.go`: `ValidateVolumes`, `ValidateVolumeMounts`,
`ValidateResourceRequirements`, ...); `scheduling` tolerations and affinity
(`ValidateTolerations`, `validateAffinity`, ...); this module the pod spec (`ValidatePodSpec`:
`nodeSelector`, `priorityClassName`, `hostname`, `subdomain`) and whole objects.

Field paths are the API server's, except that a map key is always named
(`metadata.labels[team]`, where the API server names only `metadata.labels`), so that the
operator can tell which of the job's fields a problem comes from. The operator checks every
child with these rules before creating any (`dressage_operator.children_check`); the API emulation
refuses with them (`dressage_testkit.kube`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dressage_operator.apirules.containers import container_causes, volumes_causes
from dressage_operator.apirules.fields import (
    QUANTITY_MESSAGE,
    Cause,
    Key,
    Path,
    PathPart,
    dns1123_label_problems,
    dns1123_subdomain_problems,
    format_path,
    invalid,
    labels_causes,
    metadata_causes,
)
from dressage_operator.apirules.scheduling import affinity_causes, tolerations_causes

__all__ = [
    "QUANTITY_MESSAGE",
    "Cause",
    "Key",
    "Path",
    "PathPart",
    "format_path",
    "object_causes",
    "pod_spec_causes",
]


def pod_spec_causes(spec: Mapping[str, Any], path: Path = ("spec",)) -> list[Cause]:
    """`ValidatePodSpec`, for the fields a job's pods have."""
    volumes, causes = volumes_causes(list(spec.get("volumes") or ()), (*path, "volumes"))
    for key in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(key) or ()):
            causes += container_causes(container, volumes, (*path, key, i))
    causes += labels_causes(spec.get("nodeSelector") or {}, (*path, "nodeSelector"))
    if spec.get("affinity"):
        causes += affinity_causes(spec["affinity"], (*path, "affinity"))
    for key in ("hostname", "subdomain"):
        if spec.get(key):
            value = str(spec[key])
            causes += [invalid((*path, key), value, p) for p in dns1123_label_problems(value)]
    causes += tolerations_causes(list(spec.get("tolerations") or ()), (*path, "tolerations"))
    priority = spec.get("priorityClassName")
    if priority:
        causes += [
            invalid((*path, "priorityClassName"), priority, p)
            for p in dns1123_subdomain_problems(str(priority))
        ]
    return causes


def object_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """What the API server refuses in an object: metadata of any kind; the pod spec of a Pod
    and of a Deployment's pod template."""
    causes = metadata_causes(obj.get("metadata") or {})
    kind = obj.get("kind")
    if kind == "Pod":
        causes += pod_spec_causes(obj.get("spec") or {})
    elif kind == "Deployment":
        template = (obj.get("spec") or {}).get("template") or {}
        path: Path = ("spec", "template")
        causes += metadata_causes(template.get("metadata") or {}, (*path, "metadata"))
        causes += pod_spec_causes(template.get("spec") or {}, (*path, "spec"))
    return causes
