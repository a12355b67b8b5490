"""What the emulated API server refuses: the API server's validation rules and the Pod
Security admission, as pure functions of an object.

Like a real API server, it refuses invalid Pods and Deployments (their pod template, and the
metadata of any object) on create and on patch, with the rules of `dressage_operator.apirules`
(the subset of `pkg/apis/core/validation/validation.go` and apimachinery's checks that a job's
fields reach; that module lists them): among them env var names, label keys and values,
annotation keys, resource names and quantities (a request above its limit, a fractional or
unequal GPU request), volume names, types and claims, mounts (a missing or duplicate mount
path, an undeclared volume, an absolute `subPath`), tolerations, node and pod affinity, a
`priorityClassName` that is not a DNS-1123 subdomain, an image that is missing or padded with
whitespace. Each problem is a `Cause` naming its field; a quantity outside the Kubernetes
grammar is a 400 `BadRequest` (the decoder's answer; its message names the rule, not the
field). The real server accepts an image with upper-case letters; the kubelet then fails the
pod with `InvalidImageName`, which is not emulated.

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

from typing import Any

from dressage_operator.apirules import QUANTITY_MESSAGE, Cause, object_causes, pod_spec_causes

Obj = dict[str, Any]

__all__ = ["QUANTITY_MESSAGE", "BadRequest", "Cause", "pod_spec_refusals", "refusals"]


class BadRequest(Exception):
    """The object cannot be decoded (a quantity outside the grammar): a 400, no field."""


def _quote(value: object) -> str:
    return '"' + str(value).replace('"', '\\"') + '"'


def _validation(causes: list[Cause]) -> list[Cause]:
    """The validation causes; raises `BadRequest` when the object could not be decoded."""
    undecodable = [c for c in causes if c.reason == "BadRequest"]
    if undecodable:
        raise BadRequest(undecodable[0].message)
    return causes


def pod_spec_refusals(spec: Obj, path: str = "spec") -> list[Cause]:
    """What the emulated API server refuses in a pod spec at `path` (`spec`, or
    `spec.template.spec`). Raises `BadRequest` for a quantity outside the grammar."""
    return _validation(pod_spec_causes(spec, tuple(path.split("."))))


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
    """What the emulated API server refuses in an object (see the module docstring). Raises
    `BadRequest` for a quantity outside the grammar."""
    return _validation(object_causes(obj))
