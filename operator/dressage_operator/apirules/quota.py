"""What a namespace's ResourceQuota refuses in a new pod before counting it (pure).

The ResourceQuota admission plugin (`plugin/pkg/admission/resourcequota/controller.go`) asks
each quota that matches a new pod for its constraints, and `podEvaluator.Constraints`
(`pkg/quota/v1/evaluator/core/pods.go`) requires every container and init container to
declare each resource the quota tracks among `cpu`, `memory`, `requests.cpu`,
`requests.memory`, `limits.cpu` and `limits.memory` (its `validationSet`: a request counts
for `cpu` and `requests.cpu`, a limit for `limits.cpu`). A pod that lacks one is refused with
403 Forbidden, worded `pods "NAME" is forbidden: failed quota: QUOTA: must specify
limits.cpu for: a,b; requests.memory for: a` (resources and container names sorted). The API
server's defaulting runs first: a container with a limit and no request requests the limit.

A quota matches a pod when every scope it names does (`podMatchesScopeFunc`): `Terminating`
and `NotTerminating` (`activeDeadlineSeconds`), `BestEffort` and `NotBestEffort` (the pod's
QoS class: best effort when no container declares cpu or memory), and `PriorityClass` with
`In`, `NotIn`, `Exists` or `DoesNotExist` on the pod's `priorityClassName`. Not emulated: the
usage check (`exceeded quota: ...`, a full quota, which the operator waits out), the
`CrossNamespacePodAffinity` scope, and the quota's status (the plugin reads `status.hard`,
which the quota controller copies from `spec.hard`; here `spec.hard` stands in when there is
no status).

`dressage validate --cluster --resource-quota FILE` checks the pods a job would get against a
namespace's quotas with it; the API emulation refuses with it (`dressage_testkit.kube`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]

VALIDATED = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)
"""The tracked resources a pod's every container must declare (`validationSet`)."""


def _containers(spec: Obj) -> list[Obj]:
    return [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]


def _declared(container: Obj) -> set[str]:
    """The quota resources one container's `resources` count for, after defaulting
    (`podComputeUsageHelper`)."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}
    names: set[str] = set()
    for resource in ("cpu", "memory"):
        if resource in requests:
            names |= {resource, f"requests.{resource}"}
        if resource in limits:
            names.add(f"limits.{resource}")
    return names


def missing_resources(spec: Obj, tracked: Iterable[str]) -> dict[str, list[str]]:
    """For each resource of `tracked` (a quota's `hard` names) that some container or init
    container of the pod spec does not declare, those containers' names, sorted."""
    required = VALIDATED & set(tracked)
    missing: dict[str, set[str]] = {}
    for container in _containers(spec):
        for resource in required - _declared(container):
            missing.setdefault(resource, set()).add(str(container.get("name", "")))
    return {resource: sorted(names) for resource, names in sorted(missing.items())}


def _best_effort(spec: Obj) -> bool:
    return not any(
        key in ((c.get("resources") or {}).get(kind) or {})
        for c in _containers(spec)
        for kind in ("requests", "limits")
        for key in ("cpu", "memory")
    )


def _scope_matches(scope: str, operator: str, values: list[str], spec: Obj) -> bool:
    if scope in ("Terminating", "NotTerminating"):
        deadline = spec.get("activeDeadlineSeconds")
        terminating = deadline is not None and int(deadline) >= 0
        return terminating == (scope == "Terminating")
    if scope in ("BestEffort", "NotBestEffort"):
        return _best_effort(spec) == (scope == "BestEffort")
    if scope == "PriorityClass":
        priority = spec.get("priorityClassName") or ""
        if operator == "Exists":
            return bool(priority)
        if operator == "DoesNotExist":
            return not priority
        if operator == "In":
            return bool(priority) and priority in values
        if operator == "NotIn":
            return not priority or priority not in values
    return False


def quota_matches(quota: Obj, spec: Obj) -> bool:
    """Whether a ResourceQuota's scopes all match a pod spec (no scope: every pod)."""
    quota_spec = quota.get("spec") or {}
    selectors: list[tuple[str, str, list[str]]] = [
        (str(s), "Exists", []) for s in quota_spec.get("scopes") or ()
    ]
    for expression in (quota_spec.get("scopeSelector") or {}).get("matchExpressions") or ():
        selectors.append(
            (
                str(expression.get("scopeName", "")),
                str(expression.get("operator", "")),
                [str(v) for v in expression.get("values") or ()],
            )
        )
    return all(_scope_matches(scope, op, values, spec) for scope, op, values in selectors)


def hard_resources(quota: Obj) -> list[str]:
    """What a quota limits: its `status.hard` (the admission's view), else `spec.hard`."""
    hard = (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}
    return sorted(hard)


def quota_refusal(name: str, spec: Obj, quotas: Iterable[Obj]) -> str | None:
    """The admission's refusal of pod `name` with `spec` in a namespace with `quotas` (its
    ResourceQuota objects, in the order the plugin meets them); None when it is admitted."""
    for quota in quotas:
        if not quota_matches(quota, spec):
            continue
        missing = missing_resources(spec, hard_resources(quota))
        if missing:
            listed = "; ".join(f"{r} for: {','.join(names)}" for r, names in missing.items())
            quota_name = (quota.get("metadata") or {}).get("name", "")
            return f'pods "{name}" is forbidden: failed quota: {quota_name}: must specify {listed}'
    return None
