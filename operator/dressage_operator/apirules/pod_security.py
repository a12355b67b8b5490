"""The Pod Security admission: what a namespace's enforced Pod Security Standard refuses in a
pod (pure).

The PodSecurity admission plugin refuses a Pod that breaks the level its namespace enforces
(label `pod-security.kubernetes.io/enforce`) with 403 Forbidden: `baseline` refuses host
namespaces, hostPath volumes and privileged containers; `restricted` also volume types beyond
the restricted set, privilege escalation, capabilities beyond NET_BIND_SERVICE and not
dropping ALL, running as root (runAsNonRoot unset, runAsUser 0), and a seccomp profile other
than RuntimeDefault or Localhost. `restricted_violations` words each problem as the admission
words it (`k8s.io/pod-security-admission` `policy/check_*.go`); `forbidden_message` is the
whole refusal. A Deployment is admitted (the admission only warns); its pods are refused.

`dressage validate --cluster` checks the pods a job would get against a namespace's level with
it; the API emulation refuses with it (`dressage_testkit.kube`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]

LEVELS = ("privileged", "baseline", "restricted")
"""The Pod Security Standards, from the most to the least permissive."""


def _quote(value: object) -> str:
    return '"' + str(value).replace('"', '\\"') + '"'


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
    problems += _run_as_non_root(pod_ctx, [(c["name"], ctx(c)) for c in containers])
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


def _run_as_non_root(pod_ctx: Obj, containers: Sequence[tuple[str, Obj]]) -> list[str]:
    """The `runAsNonRoot` check (`policy/check_runAsNonRoot.go`): the pod or a container that
    sets it false is refused; so is a container that leaves it unset while the pod does not
    set it true. True at either level agrees."""
    bad_setters = ["pod"] if pod_ctx.get("runAsNonRoot") is False else []
    explicit = [n for n, c in containers if c.get("runAsNonRoot") is False]
    pod_true = pod_ctx.get("runAsNonRoot") is True
    implicit = [n for n, c in containers if c.get("runAsNonRoot") is None and not pod_true]
    if explicit:
        noun = "container" if len(explicit) == 1 else "containers"
        bad_setters.append(f"{noun} {', '.join(map(_quote, explicit))}")
    if bad_setters:
        setters = " and ".join(bad_setters)
        return [f"runAsNonRoot != true ({setters} must not set securityContext.runAsNonRoot=false)"]
    if implicit:
        noun = "container" if len(implicit) == 1 else "containers"
        return [
            f"runAsNonRoot != true (pod or {noun} {', '.join(map(_quote, implicit))} must set "
            "securityContext.runAsNonRoot=true)"
        ]
    return []


def forbidden_message(name: str, level: str, problems: Sequence[str]) -> str:
    """The admission's refusal of pod `name` in a namespace enforcing `level`."""
    return f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": ' + ", ".join(
        problems
    )


def strictest_level_met(spec: Obj) -> str:
    """The strictest Pod Security Standard a pod spec meets."""
    if not restricted_violations(spec, "restricted"):
        return "restricted"
    if not restricted_violations(spec, "baseline"):
        return "baseline"
    return "privileged"
