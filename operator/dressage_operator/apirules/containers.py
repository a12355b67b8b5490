"""What the API server refuses in a pod's volumes and containers (pure).

From `pkg/apis/core/validation/validation.go`: `ValidateVolumes` and `validateVolumeSource`
(a DNS-1123 label name, unique, exactly one volume type; `persistentVolumeClaim.claimName`,
`configMap.name` and `secret.secretName` required), `ValidateVolumeMounts` (name and mount path
required, the volume must exist and be valid, mount paths unique, `subPath` relative without
`..`), `ValidateEnv` (`IsEnvVarName`), `ValidateResourceRequirements`,
`validateContainerResourceName` and `ValidateResourceQuantityValue` (requests at most their
limit; an extended resource such as `nvidia.com/gpu` a whole number, with a limit, its request
equal to it; hugepages only beside cpu or memory) and `validateContainerCommon` (an image, not
padded with whitespace). A quantity outside the grammar fails decoding before validation: the
API server answers 400 (`Cause.reason` `BadRequest`).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from dressage_operator.apirules.fields import (
    QUANTITY_MESSAGE,
    Cause,
    Key,
    Obj,
    Path,
    dns1123_label_problems,
    duplicate,
    env_var_name_problems,
    forbidden,
    invalid,
    label_key_problems,
    not_found,
    required,
)
from dressage_operator.quantity import parse_quantity

# --- volumes and mounts -------------------------------------------------------------------
VOLUME_TYPES = (
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "flexVolume",
    "configMap",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "projected",
    "scaleIO",
    "csi",
    "ephemeral",
    "image",
)
"""`VolumeSource`'s fields, in `validateVolumeSource`'s order."""
_REQUIRED_SOURCE_FIELD = {
    "persistentVolumeClaim": "claimName",
    "configMap": "name",
    "secret": "secretName",
}


def _volume_source_causes(volume: Obj, path: Path) -> list[Cause]:
    types = [t for t in VOLUME_TYPES if volume.get(t) is not None]
    if not types:
        return [required(path, "must specify a volume type")]
    causes = [forbidden((*path, t), "may not specify more than 1 volume type") for t in types[1:]]
    source = volume[types[0]]
    needed = _REQUIRED_SOURCE_FIELD.get(types[0])
    if needed and isinstance(source, dict) and not source.get(needed):
        causes.append(required((*path, types[0], needed)))
    return causes


def volumes_causes(volumes: list[Obj], path: Path) -> tuple[set[str], list[Cause]]:
    """`ValidateVolumes`: the names of the valid volumes, and the causes."""
    names: set[str] = set()
    causes: list[Cause] = []
    for i, volume in enumerate(volumes):
        at = (*path, i)
        name = str(volume.get("name") or "")
        found = _volume_source_causes(volume, at)
        if not name:
            found.append(required((*at, "name")))
        else:
            found += [invalid((*at, "name"), name, p) for p in dns1123_label_problems(name)]
        if name in names:
            found.append(duplicate((*at, "name"), name))
        if found:
            causes += found
        else:
            names.add(name)
    return names, causes


def _local_path_causes(value: str, path: Path) -> list[Cause]:
    """`validateLocalDescendingPath`: relative, without `..`."""
    causes = []
    if value.startswith("/"):
        causes.append(invalid(path, value, "must be a relative path"))
    if ".." in value.split("/"):
        causes.append(invalid(path, value, "must not contain '..'"))
    return causes


def mounts_causes(mounts: list[Obj], volumes: set[str], path: Path) -> list[Cause]:
    """`ValidateVolumeMounts`."""
    causes: list[Cause] = []
    seen: set[str] = set()
    for j, mount in enumerate(mounts):
        at = (*path, j)
        name, mount_path = str(mount.get("name") or ""), str(mount.get("mountPath") or "")
        if not name:
            causes.append(required((*at, "name")))
        if name not in volumes:
            causes.append(not_found((*at, "name"), name))
        if not mount_path:
            causes.append(required((*at, "mountPath")))
        if mount_path in seen:
            causes.append(invalid((*at, "mountPath"), mount_path, "must be unique"))
        seen.add(mount_path)
        sub_path, expr = str(mount.get("subPath") or ""), str(mount.get("subPathExpr") or "")
        if sub_path:
            causes += _local_path_causes(sub_path, (*at, "subPath"))
        if expr:
            if sub_path:
                causes.append(
                    invalid(
                        (*at, "subPathExpr"), expr, "subPathExpr and subPath are mutually exclusive"
                    )
                )
            causes += _local_path_causes(expr, (*at, "subPathExpr"))
    return causes


# --- resources ----------------------------------------------------------------------------
_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_STANDARD_RESOURCES = _STANDARD_CONTAINER_RESOURCES | frozenset(
    {
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "storage",
        "services.nodeports",
        "services.loadbalancers",
    }
)


def _hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def _native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _extended(name: str) -> bool:
    """`IsExtendedResourceName`: a prefixed name outside `kubernetes.io` (`nvidia.com/gpu`)."""
    return (
        not _native(name)
        and not name.startswith("requests.")
        and not label_key_problems("requests." + name)
    )


def _resource_name_causes(name: str, path: Path) -> list[Cause]:
    causes = [invalid(path, name, p) for p in label_key_problems(name)]
    if causes:
        return causes
    if "/" not in name:
        if name not in _STANDARD_RESOURCES and not _hugepages(name):
            causes.append(
                invalid(path, name, "must be a standard resource type or fully qualified")
            )
        if name not in _STANDARD_CONTAINER_RESOURCES and not _hugepages(name):
            causes.append(invalid(path, name, "must be a standard resource for containers"))
    elif not _native(name) and not _extended(name):
        causes.append(invalid(path, name, "doesn't follow extended resource name standard"))
    return causes


def resources_causes(resources: Mapping[str, Any], path: Path) -> list[Cause]:
    """`ValidateResourceRequirements` of one container."""
    causes: list[Cause] = []
    values: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for kind in ("limits", "requests"):
        for name, raw in (resources.get(kind) or {}).items():
            at = (*path, kind, Key(str(name)))
            causes += _resource_name_causes(str(name), at)
            value = parse_quantity(str(raw))
            if value is None:
                causes.append(Cause(at, "BadRequest", QUANTITY_MESSAGE))
                continue
            values[kind][str(name)] = value
            if value < 0:
                causes.append(invalid(at, raw, "must be greater than or equal to 0"))
            if _extended(str(name)) and value != value.to_integral_value():
                causes.append(invalid(at, raw, "must be an integer"))
    limits, requests = values["limits"], values["requests"]
    for name, request in requests.items():
        raw = (resources.get("requests") or {})[name]
        overcommit = _native(name) and not _hugepages(name)
        if name in limits:
            limit = (resources.get("limits") or {})[name]
            if request != limits[name] and not overcommit:
                causes.append(
                    invalid((*path, "requests"), raw, f"must be equal to {name} limit of {limit}")
                )
            elif request > limits[name]:
                causes.append(
                    invalid(
                        (*path, "requests"),
                        raw,
                        f"must be less than or equal to {name} limit of {limit}",
                    )
                )
        elif not overcommit:
            causes.append(
                required((*path, "limits"), "Limit must be set for non overcommitable resources")
            )
    names = set(limits) | set(requests)
    if any(_hugepages(n) for n in names) and not names & {"cpu", "memory"}:
        causes.append(forbidden(path, "HugePages require cpu or memory"))
    return causes


# --- containers ---------------------------------------------------------------------------
def container_causes(container: Obj, volumes: set[str], path: Path) -> list[Cause]:
    causes: list[Cause] = []
    image = container.get("image")
    if not image:
        causes.append(required((*path, "image")))
    elif str(image).strip() != image:
        causes.append(
            invalid((*path, "image"), image, "must not have leading or trailing whitespace")
        )
    for j, env in enumerate(container.get("env") or ()):
        name = str(env.get("name", ""))
        causes += [invalid((*path, "env", j, "name"), name, p) for p in env_var_name_problems(name)]
    causes += resources_causes(container.get("resources") or {}, (*path, "resources"))
    causes += mounts_causes(
        list(container.get("volumeMounts") or ()), volumes, (*path, "volumeMounts")
    )
    return causes
