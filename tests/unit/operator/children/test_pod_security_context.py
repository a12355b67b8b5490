"""A role's `template.securityContext`: the pod-level fields the Restricted Pod Security
Standard allows (what shared storage often needs: the claim's owner as user or group) reach
every pod of that role, merged over the operator's own, and the pods still pass the standard;
a setting that agrees with the role's profile (`runAsNonRoot: true`, what most pod templates
carry) is accepted, one that contradicts it is refused by name, and so is any other field."""

from __future__ import annotations

from typing import Any

import pytest
from dressage_testkit.kube.refusals import restricted_violations

from dressage.api import AsyncRLJob
from dressage.api.loader import JobValidationError, validate_job

from .support import pod_specs

STORAGE_OWNER = {
    "runAsUser": 2000,
    "runAsGroup": 3000,
    "fsGroup": 3000,
    "fsGroupChangePolicy": "Always",
    "supplementalGroups": [65534],
    "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/dressage.json"},
}


def _manifest(template: dict[str, Any], role: str = "trainer") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"source": "org/model"},
        "storage": {"persistentVolumeClaim": "shared"},
        "code": {"packages": ["numpy"]},  # an init container beside staging
    }
    spec[role] = {"template": template}
    return {"metadata": {"name": "job-a"}, "spec": spec}


@pytest.mark.parametrize("role", ["trainer", "inference", "proxy"])
def test_the_allowed_fields_replace_the_operators_in_every_pod_of_the_role(role: str) -> None:
    job = AsyncRLJob.model_validate(_manifest({"securityContext": STORAGE_OWNER}, role))
    specs = pod_specs(job)
    name = {"inference": "engine"}.get(role, role)
    context = specs[name]["securityContext"]
    assert context == {**STORAGE_OWNER, "runAsNonRoot": True}
    assert restricted_violations(specs[name]) == []
    for other, spec in specs.items():
        if other != name:
            assert spec["securityContext"]["runAsUser"] == 1000, other
            assert "supplementalGroups" not in spec["securityContext"], other


def test_unset_fields_keep_the_operators_values() -> None:
    job = AsyncRLJob.model_validate(_manifest({"securityContext": {"supplementalGroups": [7]}}))
    context = pod_specs(job)["trainer"]["securityContext"]
    assert context == {
        "fsGroup": 1000,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "supplementalGroups": [7],
    }


@pytest.mark.parametrize(
    ("context", "profile"),
    [
        ({"runAsNonRoot": True}, "restricted"),
        ({"runAsNonRoot": True, "runAsUser": 2000, "fsGroup": 2000}, "restricted"),
        ({"runAsNonRoot": True}, "baseline"),
        ({"runAsNonRoot": False}, "baseline"),
        ({"runAsUser": 0}, "baseline"),  # the image's root user, which Baseline allows
        ({"runAsUser": 0, "runAsNonRoot": False}, "baseline"),
    ],
)
def test_settings_that_agree_with_the_profile_are_accepted(
    context: dict[str, Any], profile: str
) -> None:
    template = {"securityContext": context, "security": {"profile": profile}}
    job = AsyncRLJob.model_validate(_manifest(template))
    rendered = pod_specs(job)["trainer"]
    for key, value in context.items():
        assert rendered["securityContext"][key] == value, key
    if profile == "restricted":
        assert restricted_violations(rendered) == []
    else:
        assert restricted_violations(rendered, "baseline") == []


@pytest.mark.parametrize(
    ("context", "profile", "field", "words"),
    [
        ({"runAsNonRoot": False}, "restricted", "runAsNonRoot", "contradicts security.profile"),
        ({"runAsUser": 0}, "restricted", "runAsUser", "contradicts security.profile"),
        (
            {"runAsUser": 0, "runAsNonRoot": True},
            "baseline",
            "runAsUser",
            "contradicts securityContext.runAsNonRoot",
        ),
    ],
)
def test_a_contradiction_is_refused_naming_the_field(
    context: dict[str, Any], profile: str, field: str, words: str
) -> None:
    template = {"securityContext": context, "security": {"profile": profile}}
    with pytest.raises(JobValidationError) as refused:
        validate_job(_manifest(template))
    ((path, message),) = refused.value.errors
    assert path == f"spec.trainer.template.securityContext.{field}"
    assert words in message


@pytest.mark.parametrize(
    ("context", "field"),
    [
        ({"privileged": True}, "privileged"),
        ({"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]}, "sysctls"),
        ({"seLinuxOptions": {"level": "s0"}}, "seLinuxOptions"),
        ({"runAsUser": -1}, "runAsUser"),
        ({"fsGroup": 2**31}, "fsGroup"),  # above the largest ID Kubernetes accepts
        ({"supplementalGroups": [-1]}, "supplementalGroups[0]"),
        ({"seccompProfile": {"type": "Unconfined"}}, "seccompProfile.type"),
        ({"seccompProfile": {"type": "Localhost"}}, "seccompProfile.localhostProfile"),
    ],
)
def test_other_fields_are_refused_by_name(context: dict[str, Any], field: str) -> None:
    with pytest.raises(JobValidationError) as refused:
        validate_job(_manifest({"securityContext": context}))
    ((path, _),) = refused.value.errors
    assert path == f"spec.trainer.template.securityContext.{field}"


def test_a_field_outside_the_restricted_standard_says_what_is_accepted() -> None:
    with pytest.raises(JobValidationError) as refused:
        validate_job(_manifest({"securityContext": {"windowsOptions": {}}}))
    ((_, message),) = refused.value.errors
    assert "Restricted Pod Security Standard" in message
    assert "runAsNonRoot, runAsUser, runAsGroup, fsGroup, fsGroupChangePolicy" in message


def _pod(pod: dict[str, Any], **containers: dict[str, Any]) -> dict[str, Any]:
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return {
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, **pod},
        "initContainers": [{"name": "init", "securityContext": {**restricted}}],
        "containers": [
            {"name": name, "securityContext": {**restricted, **ctx}}
            for name, ctx in containers.items()
        ],
    }


@pytest.mark.parametrize(
    ("pod", "main", "problem"),
    [
        ({"runAsNonRoot": True}, {}, None),
        ({"runAsNonRoot": True}, {"runAsNonRoot": True}, None),
        ({}, {"runAsNonRoot": True}, 'pod or container "init" must set'),
        ({}, {}, 'pod or containers "init", "main" must set'),
        ({"runAsNonRoot": True}, {"runAsNonRoot": False}, 'container "main" must not set'),
        ({"runAsNonRoot": False}, {"runAsNonRoot": True}, "pod must not set"),
    ],
)
def test_the_admission_reads_run_as_non_root_at_pod_and_container_level(
    pod: dict[str, Any], main: dict[str, Any], problem: str | None
) -> None:
    """`policy/check_runAsNonRoot.go`: true at either level agrees; false at either level, or
    a container left unset under a pod that does not set true, is refused."""
    found = [p for p in restricted_violations(_pod(pod, main=main)) if "runAsNonRoot" in p]
    if problem is None:
        assert found == []
    else:
        (only,) = found
        assert only.startswith("runAsNonRoot != true (")
        assert problem in only
