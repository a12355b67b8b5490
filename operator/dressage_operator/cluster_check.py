"""What a cluster would refuse in an AsyncRLJob manifest, found offline (pure).

`dressage validate --cluster` runs it. Each check is the operator's own, or the API server
rule the operator already checks its children with, in the order a reconcile makes them
(`handlers.reconcile`), with the operator's settings (`OperatorConfig.from_env`: the chart's
`limits:` reach the operator as `DRESSAGE_OPERATOR_LIMITS`):

1. the API server's rules for the job object's own metadata (`apirules`): `kubectl apply`
   itself is refused;
2. `validation.spec_errors`: the job model, the CRD's CEL rules and what a cluster cannot run
   (`InvalidSpec`);
3. `limits.limit_errors`: this cluster's limits (`LimitExceeded`);
4. `children_check.child_errors`: the children carrying the job's fields against the strict
   Kubernetes schemas of the cluster's release and the API server's rules (`InvalidSpec`; with
   `checkChildren` off, the API server refuses the child instead: `ChildRefused`);
5. in a namespace that enforces a Pod Security Standard, the PodSecurity admission on each pod
   the operator would create (`apirules.pod_security`): the API server refuses the pod and the
   operator fails the job (`ChildRefused`);
6. in a namespace with ResourceQuota objects, the ResourceQuota admission on each of those
   pods (`apirules.quota`): a container or init container that does not declare a resource a
   quota tracks (`limits.cpu` where the role gives no cpu limit) is named, and the pod refused
   (`ChildRefused`).

The operator stops at the first of 2-4 that refuses, and its status names that stage's fields;
here every stage that can run does, so that one pass names everything to fix. Stages 3-5 need
a job the model accepts. Each stage that refuses carries the message the operator writes into
`status.message` for it, made by the operator's own code (`decide.invalid_spec_status`,
`plan.ChildResult.describe`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dressage.api.sglang import untested_release_message
from dressage.api.status import AsyncRLJobStatus
from dressage_operator import children_check, naming
from dressage_operator.apirules.fields import metadata_causes
from dressage_operator.apirules.pod_security import (
    LEVELS,
    forbidden_message,
    restricted_violations,
    strictest_level_met,
)
from dressage_operator.apirules.quota import hard_resources, quota_refusal
from dressage_operator.children import Obj, Owner
from dressage_operator.config import OperatorConfig
from dressage_operator.decide import REASON_INVALID_SPEC, REASON_LIMIT_EXCEEDED, invalid_spec_status
from dressage_operator.limits import limit_errors
from dressage_operator.plan import REASON_CHILD_REFUSED, Applied, ChildResult
from dressage_operator.validation import spec_errors

REFUSED_BY_THE_API_SERVER = "Invalid"
"""The stage of a job object the API server refuses itself (`kubectl apply` fails)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ROLE_FIELD = {
    naming.ROLE_TRAINER: "spec.trainer.template.security",
    naming.ROLE_INFERENCE: "spec.inference.template.security",
    naming.ROLE_PROXY: "spec.proxy.template.security",
}
_RESOURCES_FIELD = {
    naming.ROLE_TRAINER: "spec.trainer.resources",
    naming.ROLE_INFERENCE: "spec.inference.resources",
    naming.ROLE_PROXY: "spec.proxy.resources",
}


@dataclass(frozen=True)
class Refusal:
    """One problem, at the job's field (or the child's, where it comes from no job field)."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Stage:
    """The refusals of one check, and what the job's status says for them."""

    reason: str
    """`Invalid` (the API server refuses the job), `InvalidSpec`, `LimitExceeded` or
    `ChildRefused`: the reason of the job's `Failed` condition."""
    refusals: tuple[Refusal, ...]
    status_message: str
    """The job's `status.message` when this is the stage the operator refuses at."""


@dataclass(frozen=True)
class ClusterCheck:
    """What a cluster would do with one job manifest."""

    name: str
    stages: tuple[Stage, ...]
    """Only the stages that refuse, in the operator's order."""
    checked: tuple[str, ...]
    """The checks made, in words (a valid manifest's report)."""
    warnings: tuple[str, ...] = ()
    """What a cluster accepts but warns about (an SGLang release newer than the tested)."""

    @property
    def refused(self) -> bool:
        return bool(self.stages)


def _spec_stage(reason: str, errors: list[tuple[str, str]]) -> Stage:
    status = invalid_spec_status(AsyncRLJobStatus(), errors, 1, _EPOCH, reason)
    refusals = tuple(Refusal(f, m) for f, m in errors)
    return Stage(reason, refusals, status.message or "")


def _child_refused(results: list[ChildResult]) -> str:
    """`status.message` of a job whose first child the API server refused (`settle`)."""
    more = f" (and {len(results) - 1} more)" if len(results) > 1 else ""
    return (
        f"refused by the API server: {results[0].describe()}{more}; "
        "the operator tries again when the spec changes"
    )


def _pod_security(rendered: list[Obj], level: str) -> tuple[list[Refusal], list[ChildResult], str]:
    """The PodSecurity admission at `level` on each rendered pod (a Deployment's through its
    pod template); and the strictest level every pod meets."""
    refusals: list[Refusal] = []
    results: list[ChildResult] = []
    met = "restricted"
    for obj in rendered:
        name = obj["metadata"]["name"]
        template = obj["spec"]["template"] if obj["kind"] == "Deployment" else obj
        spec = template.get("spec") or {}
        met = min(met, strictest_level_met(spec), key=LEVELS.index)
        problems = restricted_violations(spec, level) if level != "privileged" else []
        if not problems:
            continue
        role = (template["metadata"].get("labels") or {}).get(naming.LABEL_ROLE, "")
        field = _ROLE_FIELD.get(role, f"{obj['kind']} {name}")
        if obj["kind"] == "Pod":
            result = ChildResult(
                "Pod",
                name,
                "create",
                Applied.REFUSED,
                403,
                forbidden_message(name, level, problems),
            )
            results.append(result)
            refusals.append(Refusal(field, result.describe()))
        else:
            message = forbidden_message(f"{name}-<pod>", level, problems)
            refusals.append(Refusal(field, f"the pods of {obj['kind']} {name}: {message}"))
    return refusals, results, met


def _quotas(
    rendered: list[Obj], quotas: Sequence[Mapping[str, Any]]
) -> tuple[list[Refusal], list[ChildResult]]:
    """The ResourceQuota admission on each rendered pod (a Deployment's through its pod
    template), reported against the role's `resources`: its init containers take the main
    container's."""
    refusals: list[Refusal] = []
    results: list[ChildResult] = []
    for obj in rendered:
        name = obj["metadata"]["name"]
        template = obj["spec"]["template"] if obj["kind"] == "Deployment" else obj
        pod = name if obj["kind"] == "Pod" else f"{name}-<pod>"
        message = quota_refusal(pod, template.get("spec") or {}, quotas)
        if message is None:
            continue
        role = (template["metadata"].get("labels") or {}).get(naming.LABEL_ROLE, "")
        field = _RESOURCES_FIELD.get(role, f"{obj['kind']} {name}")
        if obj["kind"] == "Pod":
            result = ChildResult("Pod", name, "create", Applied.REFUSED, 403, message)
            results.append(result)
            refusals.append(Refusal(field, result.describe()))
        else:
            refusals.append(Refusal(field, f"the pods of {obj['kind']} {name}: {message}"))
    return refusals, results


def check(
    body: Mapping[str, Any],
    config: OperatorConfig,
    *,
    namespace: str = "default",
    release: str = children_check.DEFAULT_SCHEMA_RELEASE,
    pod_security: str = "privileged",
    quotas: Sequence[Mapping[str, Any]] = (),
) -> ClusterCheck:
    """Every refusal a cluster would make of the job object `body` in `namespace`, whose API
    server is Kubernetes `release` (schemas), enforces `pod_security` (`privileged`:
    nothing) and holds the ResourceQuota objects `quotas`."""
    name = str((body.get("metadata") or {}).get("name", ""))
    stages: list[Stage] = []
    checked: list[str] = []
    meta = [Refusal(c.field, c.message) for c in metadata_causes(body.get("metadata") or {})]
    if meta:
        message = f'AsyncRLJob.dressage.io "{name}" is invalid: ' + "; ".join(map(str, meta))
        stages.append(Stage(REFUSED_BY_THE_API_SERVER, tuple(meta), message))
    checked.append("the job's metadata by the API server's rules")
    job, errors = spec_errors(body, f"{namespace}/{name}")
    if errors:
        stages.append(_spec_stage(REASON_INVALID_SPEC, list(errors)))
    checked.append(
        "the job model, the CRD's validation rules and what a cluster cannot run "
        "(the operator's SpecValid check)"
    )
    if job is None:
        return ClusterCheck(name, tuple(stages), tuple(checked))
    over = limit_errors(job.spec, config.limits)
    if over:
        stages.append(_spec_stage(REASON_LIMIT_EXCEEDED, over))
    limits = ", ".join(f"{k} {v}" for k, v in sorted(config.limits.items()))
    checked.append(f"this cluster's limits ({limits}; DRESSAGE_OPERATOR_LIMITS)")
    owner = Owner(name=name, namespace=namespace, uid="dressage-validate")
    rendered = children_check.rendered_children(job, owner, config)
    shown = ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in rendered)
    children = children_check.child_errors(job, owner, config, release)
    if children and config.check_children:
        stages.append(_spec_stage(REASON_INVALID_SPEC, children))
    elif children:
        # Unchecked, the child is sent and the API server refuses it (or drops a field the
        # schema does not know): the job's status then quotes the API server's own message.
        refusals = tuple(Refusal(f, m) for f, m in children)
        stages.append(Stage(REASON_CHILD_REFUSED, refusals, str(refusals[0])))
    checked.append(
        f"the children that carry the job's fields ({shown}) against the strict Kubernetes "
        f"{release} schemas and the API server's rules"
    )
    security, results, met = _pod_security(rendered, pod_security)
    if security:
        status = _child_refused(results) if results else security[0].message
        stages.append(Stage(REASON_CHILD_REFUSED, tuple(security), status))
    enforced = "no level" if pod_security == "privileged" else f"'{pod_security}'"
    checked.append(f"the pods' Pod Security: they meet '{met}' (the namespace enforces {enforced})")
    over_quota, results = _quotas(rendered, quotas)
    if over_quota:
        status = _child_refused(results) if results else over_quota[0].message
        stages.append(Stage(REASON_CHILD_REFUSED, tuple(over_quota), status))
    if quotas:
        names = ", ".join(
            f"{(q.get('metadata') or {}).get('name', '')} ({', '.join(hard_resources(q))})"
            for q in quotas
        )
        checked.append(f"the pods' resources against the namespace's ResourceQuotas: {names}")
    warning = untested_release_message(job.spec.inference.sglang_version)
    return ClusterCheck(name, tuple(stages), tuple(checked), (warning,) if warning else ())


def job_documents(docs: list[Any]) -> list[Mapping[str, Any]]:
    """The AsyncRLJob objects among a file's YAML documents."""
    return [d for d in docs if isinstance(d, Mapping) and d.get("kind") == "AsyncRLJob"]


def quota_documents(docs: list[Any]) -> list[Mapping[str, Any]]:
    """The ResourceQuota objects among a file's YAML documents, a `List`'s items among them
    (what `kubectl get resourcequota -o yaml` prints)."""
    found: list[Mapping[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        items = doc.get("items") if doc.get("kind") == "List" else [doc]
        found += [
            d for d in items or () if isinstance(d, Mapping) and d.get("kind") == "ResourceQuota"
        ]
    return found
