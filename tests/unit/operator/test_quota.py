"""The ResourceQuota admission's constraint (`pkg/quota/v1/evaluator/core/pods.go`
`Constraints`, `plugin/pkg/admission/resourcequota/controller.go`): in a namespace whose quota
tracks cpu or memory, every container and init container declares what it tracks, or the pod
is refused with the plugin's words; a quota's scopes decide which pods it constrains."""

from __future__ import annotations

from typing import Any

import pytest
from dressage_operator.apirules.quota import missing_resources, quota_matches, quota_refusal


def _pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)],
        **spec,
    }


def _quota(hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "q"}, "spec": {"hard": hard, **spec}}


@pytest.mark.parametrize(
    ("resources", "tracked", "missing"),
    [
        ({}, ["pods", "requests.nvidia.com/gpu"], {}),  # not in the validation set
        ({}, ["cpu"], {"cpu": ["c0"]}),
        ({"requests": {"cpu": "1"}}, ["cpu", "requests.cpu"], {}),
        ({"requests": {"cpu": "1"}}, ["limits.cpu"], {"limits.cpu": ["c0"]}),
        ({"limits": {"memory": "1Gi"}}, ["requests.memory", "limits.memory"], {}),  # defaulted
        ({"requests": {"memory": "1Gi"}}, ["memory", "requests.cpu"], {"requests.cpu": ["c0"]}),
    ],
)
def test_each_tracked_compute_resource_must_be_declared(
    resources: dict[str, Any], tracked: list[str], missing: dict[str, list[str]]
) -> None:
    assert missing_resources(_pod(resources), tracked) == missing


def test_the_refusal_names_each_resource_and_the_containers_sorted() -> None:
    spec = _pod({}, {"requests": {"cpu": "1"}})
    spec["initContainers"] = [{"name": "a-init"}]
    hard = {"requests.cpu": "4", "limits.memory": "8Gi"}
    assert quota_refusal("p", spec, [_quota(hard)]) == (
        'pods "p" is forbidden: failed quota: q: must specify limits.memory for: a-init,c0,c1; '
        "requests.cpu for: a-init,c0"
    )
    declared = _pod({"limits": {"cpu": "1", "memory": "1Gi"}})
    assert quota_refusal("p", declared, [_quota(hard)]) is None


@pytest.mark.parametrize(
    ("quota_spec", "pod_spec", "matches"),
    [
        ({}, {}, True),
        ({"scopes": ["NotTerminating"]}, {}, True),
        ({"scopes": ["Terminating"]}, {}, False),
        ({"scopes": ["Terminating"]}, {"activeDeadlineSeconds": 60}, True),
        ({"scopes": ["BestEffort"]}, {}, True),
        ({"scopes": ["NotBestEffort"]}, {}, False),
        (
            {"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["gpu"]}]}},
            {"priorityClassName": "gpu"},
            True,
        ),
        (
            {"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["gpu"]}]}},
            {},
            False,
        ),
        (
            {"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["gpu"]}]}},
            {},
            True,
        ),
        (
            {"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "Exists"}]}},
            {},
            False,
        ),
    ],
)  # fmt: skip
def test_a_quota_constrains_only_the_pods_its_scopes_match(
    quota_spec: dict[str, Any], pod_spec: dict[str, Any], matches: bool
) -> None:
    quota = _quota({"requests.cpu": "4"}, **quota_spec)
    spec = _pod({}, **pod_spec)
    assert quota_matches(quota, spec) is matches
    assert (quota_refusal("p", spec, [quota]) is not None) is matches


def test_the_status_hard_is_what_the_admission_reads() -> None:
    quota = _quota({"requests.cpu": "4"})
    quota["status"] = {"hard": {"limits.cpu": "4"}}
    refusal = quota_refusal("p", _pod({"requests": {"cpu": "1"}}), [quota])
    assert refusal is not None
    assert "limits.cpu for: c0" in refusal
