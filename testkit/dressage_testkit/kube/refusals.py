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

In a namespace with ResourceQuota objects (created through the API, as `kubectl apply` does)
it refuses a Pod with a container or init container that does not declare a resource a
matching quota tracks among cpu, memory, `requests.*` and `limits.*` of them, with 403
`Forbidden` and the ResourceQuota admission's message (`quota_refusal`: `pods "x" is
forbidden: failed quota: q: must specify limits.cpu for: a,b`); the quota's usage
(`exceeded quota`) is not counted.
"""

from __future__ import annotations

from typing import Any

from dressage_operator.apirules import QUANTITY_MESSAGE, Cause, object_causes, pod_spec_causes
from dressage_operator.apirules.pod_security import (
    ENFORCE_LABEL,
    RESTRICTED_VOLUME_TYPES,
    restricted_violations,
)
from dressage_operator.apirules.quota import quota_refusal

Obj = dict[str, Any]

__all__ = [
    "ENFORCE_LABEL",
    "QUANTITY_MESSAGE",
    "RESTRICTED_VOLUME_TYPES",
    "BadRequest",
    "Cause",
    "pod_spec_refusals",
    "quota_refusal",
    "refusals",
    "restricted_violations",
]


class BadRequest(Exception):
    """The object cannot be decoded (a quantity outside the grammar): a 400, no field."""


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


def refusals(obj: Obj) -> list[Cause]:
    """What the emulated API server refuses in an object (see the module docstring). Raises
    `BadRequest` for a quantity outside the grammar."""
    return _validation(object_causes(obj))
