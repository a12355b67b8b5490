"""What the emulated API server refuses: a subset of the real validation rules (pure).

Like a real API server, it refuses invalid Pods and Deployments (their pod template) on create
and on patch, for this subset of the API server's validation (`refusals`):

- env var names: `[-._a-zA-Z][-._a-zA-Z0-9]*` (Kubernetes `IsEnvVarName`) -> 422 `Invalid`,
  field `spec.containers[i].env[j].name`;
- resource quantities in `resources.requests`/`limits`: a value outside the Kubernetes quantity
  grammar (`1`, `1.5`, `100m`, `64Gi`, `1e3`, ...) -> 400 `BadRequest`, as the real server's
  decoder answers (its message names the rule, not the field); a negative one -> 422,
  field `...resources.requests[cpu]`; a request above its limit -> 422;
- duplicate volume names -> 422, field `spec.volumes[i].name`; a mount of an undeclared
  volume -> 422, field `spec.containers[i].volumeMounts[j].name`;
- duplicate mount paths in one container -> 422, field `...volumeMounts[j].mountPath`;
- a container image with leading or trailing whitespace, or none -> 422, field
  `spec.containers[i].image` (the real server accepts inner spaces; the kubelet then fails
  the pod with `InvalidImageName`, which is not emulated).

In a namespace labelled `pod-security.kubernetes.io/enforce: restricted`
(`EmulatedCluster.label_namespace`: kmock cannot serve Namespace objects, so the emulation keeps
namespace labels itself) it also refuses a Pod
that breaks the Restricted Pod Security Standard (`restricted_violations`: volume types,
privileged, privilege escalation, capabilities, runAsNonRoot, runAsUser 0, seccomp, host
namespaces) with 403 `Forbidden`, as the PodSecurity admission does; `baseline` refuses
hostPath volumes, privileged containers and host namespaces. Deployments are admitted (the
real admission only warns for them; their pods are the ones refused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from dressage_operator.quantity import parse_quantity

Obj = dict[str, Any]


ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
ENV_VAR_NAME_MESSAGE = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', "
    "'-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
    "'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"
)
QUANTITY_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


@dataclass(frozen=True)
class Cause:
    """One problem the emulated API server finds in an object, as in `details.causes[]`."""

    field: str
    reason: str
    """`FieldValueInvalid`, `FieldValueDuplicate`, `FieldValueNotFound`, `FieldValueRequired`."""
    message: str


class BadRequest(Exception):
    """The object cannot be decoded (a quantity outside the grammar): a 400, no field."""


def _invalid(field: str, value: object, detail: str) -> Cause:
    return Cause(field, "FieldValueInvalid", f"Invalid value: {_quote(value)}: {detail}")


def _quote(value: object) -> str:
    return '"' + str(value).replace('"', '\\"') + '"'


def _container_refusals(path: str, container: Obj, volumes: set[str]) -> list[Cause]:
    causes: list[Cause] = []
    image = container.get("image")
    if not image:
        causes.append(Cause(f"{path}.image", "FieldValueRequired", "Required value"))
    elif str(image).strip() != image:
        causes.append(
            _invalid(f"{path}.image", image, "must not have leading or trailing whitespace")
        )
    for j, env in enumerate(container.get("env") or ()):
        name = str(env.get("name", ""))
        if not ENV_VAR_NAME.match(name):
            causes.append(_invalid(f"{path}.env[{j}].name", name, ENV_VAR_NAME_MESSAGE))
    resources = container.get("resources") or {}
    values: dict[str, dict[str, Decimal]] = {}
    for kind in ("requests", "limits"):
        for resource, raw in (resources.get(kind) or {}).items():
            value = parse_quantity(str(raw))
            if value is None:
                raise BadRequest(QUANTITY_MESSAGE)
            field = f"{path}.resources.{kind}[{resource}]"
            if value < 0:
                causes.append(_invalid(field, raw, "must be greater than or equal to 0"))
            values.setdefault(kind, {})[resource] = value
    for resource, request in values.get("requests", {}).items():
        limit = values.get("limits", {}).get(resource)
        if limit is not None and request > limit:
            raw = resources["requests"][resource]
            causes.append(
                _invalid(
                    f"{path}.resources.requests",
                    raw,
                    f"must be less than or equal to {resource} limit of "
                    f"{resources['limits'][resource]}",
                )
            )
    paths: set[str] = set()
    for j, mount in enumerate(container.get("volumeMounts") or ()):
        name, mount_path = mount.get("name"), mount.get("mountPath")
        if name not in volumes:
            causes.append(
                Cause(
                    f"{path}.volumeMounts[{j}].name",
                    "FieldValueNotFound",
                    f"Not found: {_quote(name)}",
                )
            )
        if mount_path in paths:
            causes.append(
                _invalid(f"{path}.volumeMounts[{j}].mountPath", mount_path, "must be unique")
            )
        paths.add(mount_path)
    return causes


def pod_spec_refusals(spec: Obj, path: str = "spec") -> list[Cause]:
    """What the emulated API server refuses in a pod spec (see the module docstring).
    Raises `BadRequest` for a quantity outside the grammar."""
    causes: list[Cause] = []
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or ()):
        name = volume.get("name")
        if name in volumes:
            causes.append(
                Cause(
                    f"{path}.volumes[{i}].name",
                    "FieldValueDuplicate",
                    f"Duplicate value: {_quote(name)}",
                )
            )
        volumes.add(name)
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or ()):
            causes += _container_refusals(f"{path}.{key}[{i}]", container, volumes)
    return causes


ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)


def restricted_violations(spec: Obj, level: str = "restricted") -> list[str]:
    """What the PodSecurity admission at `level` (`baseline` or `restricted`) finds wrong with
    a pod spec, worded as it words it; empty when the pod is admitted."""
    problems: list[str] = []
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    pod_ctx = spec.get("securityContext") or {}

    def ctx(c: Obj) -> Obj:
        return c.get("securityContext") or {}

    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            problems.append(f"host namespaces ({key}=true)")
    host_path = [v["name"] for v in spec.get("volumes") or () if "hostPath" in v]
    if host_path:
        problems.append(f"hostPath volumes (volumes {', '.join(map(_quote, host_path))})")
    privileged = [c["name"] for c in containers if ctx(c).get("privileged")]
    if privileged:
        names = ", ".join(map(_quote, privileged))
        problems.append(f"privileged (containers {names} must not set privileged=true)")
    if level != "restricted":
        return problems
    kinds = [
        v["name"]
        for v in spec.get("volumes") or ()
        if not (set(v) - {"name"}) <= RESTRICTED_VOLUME_TYPES and "hostPath" not in v
    ]
    if kinds:
        problems.append(f"restricted volume types (volumes {', '.join(map(_quote, kinds))})")
    escalating = [
        c["name"] for c in containers if ctx(c).get("allowPrivilegeEscalation") is not False
    ]
    if escalating:
        problems.append(
            f"allowPrivilegeEscalation != false (containers {', '.join(map(_quote, escalating))}"
            " must set securityContext.allowPrivilegeEscalation=false)"
        )
    undropped = [
        c["name"]
        for c in containers
        if "ALL" not in ((ctx(c).get("capabilities") or {}).get("drop") or ())
    ]
    if undropped:
        problems.append(
            f"unrestricted capabilities (containers {', '.join(map(_quote, undropped))} must "
            'set securityContext.capabilities.drop=["ALL"])'
        )
    added = [
        c["name"]
        for c in containers
        if set((ctx(c).get("capabilities") or {}).get("add") or ()) - {"NET_BIND_SERVICE"}
    ]
    if added:
        problems.append(
            f"unrestricted capabilities (containers {', '.join(map(_quote, added))} must not "
            "include capabilities other than NET_BIND_SERVICE in securityContext.capabilities.add)"
        )
    root_ok = pod_ctx.get("runAsNonRoot") is True
    as_root = [
        c["name"]
        for c in containers
        if ctx(c).get("runAsNonRoot") is False or not (root_ok or ctx(c).get("runAsNonRoot"))
    ]
    if as_root:
        problems.append(
            "runAsNonRoot != true (pod or containers "
            f"{', '.join(map(_quote, as_root))} must set securityContext.runAsNonRoot=true)"
        )
    if pod_ctx.get("runAsUser") == 0 or any(ctx(c).get("runAsUser") == 0 for c in containers):
        problems.append("runAsUser=0 (pod and containers must not set runAsUser=0)")
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    no_seccomp = [
        c["name"]
        for c in containers
        if ((ctx(c).get("seccompProfile") or {}).get("type") or pod_seccomp)
        not in ("RuntimeDefault", "Localhost")
    ]
    if no_seccomp:
        problems.append(
            "seccompProfile (pod or containers "
            f"{', '.join(map(_quote, no_seccomp))} must set securityContext.seccompProfile.type "
            'to "RuntimeDefault" or "Localhost")'
        )
    return problems


def refusals(obj: Obj) -> list[Cause]:
    """What the emulated API server refuses in a Pod or a Deployment; nothing for other kinds."""
    kind = obj.get("kind")
    if kind == "Pod":
        return pod_spec_refusals(obj.get("spec") or {})
    if kind == "Deployment":
        template = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        return pod_spec_refusals(template, "spec.template.spec")
    return []
