"""What the API server refuses in a pod's tolerations and affinity (pure).

From `pkg/apis/core/validation/validation.go`: `ValidateTolerations` (operators `Equal` and
`Exists`, an empty key only with `Exists`, `tolerationSeconds` only with `NoExecute`, values
as label values, the three taint effects), `validateAffinity` with `ValidateNodeSelector`,
`ValidateNodeSelectorTerm`, `ValidateNodeSelectorRequirement` and
`ValidateNodeFieldSelectorRequirement` (values by operator, keys as label keys),
`ValidatePreferredSchedulingTerms` and `validateWeightedPodAffinityTerms` (weights 1-100) and
`validatePodAffinityTerm` (a label selector as `ValidateLabelSelector` checks it, namespaces as
DNS-1123 labels, a topology key).
"""

from __future__ import annotations

from dressage_operator.apirules.fields import (
    Cause,
    Obj,
    Path,
    dns1123_label_problems,
    forbidden,
    invalid,
    label_key_problems,
    label_value_problems,
    labels_causes,
    not_supported,
    required,
)

TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def tolerations_causes(tolerations: list[Obj], path: Path) -> list[Cause]:
    """`ValidateTolerations`."""
    causes: list[Cause] = []
    for i, toleration in enumerate(tolerations):
        at = (*path, i)
        key = str(toleration.get("key") or "")
        operator = str(toleration.get("operator") or "")
        value = str(toleration.get("value") or "")
        effect = str(toleration.get("effect") or "")
        if key:
            causes += [invalid((*at, "key"), key, p) for p in label_key_problems(key)]
        if not key and operator != "Exists":
            causes.append(
                invalid(
                    (*at, "operator"),
                    operator,
                    'operator must be Exists when `key` is empty, which means "match all values '
                    'and all keys"',
                )
            )
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            causes.append(
                invalid(
                    (*at, "effect"),
                    effect,
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                )
            )
        if operator in ("Equal", ""):
            problems = label_value_problems(value)
            if problems:
                causes.append(invalid((*at, "operator"), value, ";".join(problems)))
        elif operator == "Exists":
            if value:
                causes.append(
                    invalid(
                        (*at, "operator"),
                        toleration,
                        "value must be empty when `operator` is 'Exists'",
                    )
                )
        else:
            causes.append(not_supported((*at, "operator"), operator, TOLERATION_OPERATORS))
        if effect and effect not in TAINT_EFFECTS:
            causes.append(not_supported((*at, "effect"), effect, TAINT_EFFECTS))
    return causes


def _requirement_causes(requirement: Obj, path: Path, label_values: bool = True) -> list[Cause]:
    """`ValidateNodeSelectorRequirement` (node affinity)."""
    causes: list[Cause] = []
    operator = requirement.get("operator")
    values = list(requirement.get("values") or ())
    if operator in ("In", "NotIn"):
        if not values:
            causes.append(
                required((*path, "values"), "must be specified when `operator` is 'In' or 'NotIn'")
            )
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            causes.append(
                forbidden(
                    (*path, "values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            causes.append(
                required(
                    (*path, "values"),
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                )
            )
    else:
        causes.append(invalid((*path, "operator"), operator or "", "not a valid selector operator"))
    key = str(requirement.get("key") or "")
    causes += [invalid((*path, "key"), key, p) for p in label_key_problems(key)]
    if label_values:
        for k, value in enumerate(values):
            causes += [
                invalid((*path, "values", k), value, p) for p in label_value_problems(str(value))
            ]
    return causes


def _field_requirement_causes(requirement: Obj, path: Path) -> list[Cause]:
    """`ValidateNodeFieldSelectorRequirement`: only `metadata.name`, one value."""
    causes: list[Cause] = []
    if requirement.get("operator") in ("In", "NotIn"):
        if len(requirement.get("values") or ()) != 1:
            causes.append(
                required(
                    (*path, "values"),
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field "
                    "selector",
                )
            )
    else:
        causes.append(
            invalid(
                (*path, "operator"),
                requirement.get("operator") or "",
                "not a valid selector operator",
            )
        )
    if requirement.get("key") != "metadata.name":
        causes.append(
            invalid((*path, "key"), requirement.get("key") or "", "not a valid field selector key")
        )
    return causes


def _term_causes(term: Obj, path: Path, label_values: bool) -> list[Cause]:
    causes: list[Cause] = []
    for j, requirement in enumerate(term.get("matchExpressions") or ()):
        causes += _requirement_causes(requirement, (*path, "matchExpressions", j), label_values)
    for j, requirement in enumerate(term.get("matchFields") or ()):
        causes += _field_requirement_causes(requirement, (*path, "matchFields", j))
    return causes


def _weight_causes(weight: object, path: Path) -> list[Cause]:
    if not isinstance(weight, int) or not 1 <= weight <= 100:
        return [invalid(path, weight, "must be in the range 1-100")]
    return []


def _selector_causes(selector: Obj, path: Path) -> list[Cause]:
    """`ValidateLabelSelector`."""
    causes = labels_causes(selector.get("matchLabels") or {}, (*path, "matchLabels"))
    for j, requirement in enumerate(selector.get("matchExpressions") or ()):
        at = (*path, "matchExpressions", j)
        operator = requirement.get("operator")
        values = list(requirement.get("values") or ())
        if operator in ("In", "NotIn"):
            if not values:
                causes.append(
                    required(
                        (*at, "values"), "must be specified when `operator` is 'In' or 'NotIn'"
                    )
                )
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                causes.append(
                    forbidden(
                        (*at, "values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            causes.append(
                invalid((*at, "operator"), operator or "", "not a valid selector operator")
            )
        key = str(requirement.get("key") or "")
        causes += [invalid((*at, "key"), key, p) for p in label_key_problems(key)]
        for k, value in enumerate(values):
            causes += [
                invalid((*at, "values", k), value, p) for p in label_value_problems(str(value))
            ]
    return causes


def _pod_term_causes(term: Obj, path: Path) -> list[Cause]:
    """`validatePodAffinityTerm`."""
    causes = _selector_causes(term.get("labelSelector") or {}, (*path, "labelSelector"))
    for namespace in term.get("namespaces") or ():
        causes += [
            invalid((*path, "namespace"), namespace, p)
            for p in dns1123_label_problems(str(namespace))
        ]
    topology = str(term.get("topologyKey") or "")
    if not topology:
        causes.append(required((*path, "topologyKey"), "can not be empty"))
    causes += [invalid((*path, "topologyKey"), topology, p) for p in label_key_problems(topology)]
    return causes


def _pod_affinity_causes(affinity: Obj, path: Path) -> list[Cause]:
    causes: list[Cause] = []
    required_terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or ()
    for i, term in enumerate(required_terms):
        causes += _pod_term_causes(
            term, (*path, "requiredDuringSchedulingIgnoredDuringExecution", i)
        )
    preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    for i, weighted in enumerate(preferred):
        at = (*path, "preferredDuringSchedulingIgnoredDuringExecution", i)
        causes += _weight_causes(weighted.get("weight"), (*at, "weight"))
        causes += _pod_term_causes(weighted.get("podAffinityTerm") or {}, (*at, "podAffinityTerm"))
    return causes


def affinity_causes(affinity: Obj, path: Path) -> list[Cause]:
    """`validateAffinity`: node affinity, pod affinity and anti-affinity."""
    causes: list[Cause] = []
    node = affinity.get("nodeAffinity") or {}
    selector = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if selector is not None:
        at = (
            *path,
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
        )
        terms = list(selector.get("nodeSelectorTerms") or ())
        if not terms:
            causes.append(required(at, "must have at least one node selector term"))
        for i, term in enumerate(terms):
            causes += _term_causes(term, (*at, i), label_values=True)
    for i, weighted in enumerate(node.get("preferredDuringSchedulingIgnoredDuringExecution") or ()):
        at = (*path, "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution", i)
        causes += _weight_causes(weighted.get("weight"), (*at, "weight"))
        # Preferred terms may name label values no node has (upstream allows them).
        causes += _term_causes(
            weighted.get("preference") or {}, (*at, "preference"), label_values=False
        )
    for kind in ("podAffinity", "podAntiAffinity"):
        if affinity.get(kind):
            causes += _pod_affinity_causes(affinity[kind], (*path, kind))
    return causes
