"""A role's `template.securityContext`: the pod-level fields the Restricted Pod Security
Standard allows (what shared storage often needs: the claim's owner as user or group) reach
every pod of that role, merged over the operator's own, and the pods still pass the standard;
any other field is refused by name."""

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
    ("context", "field"),
    [
        ({"runAsNonRoot": False}, "runAsNonRoot"),
        ({"privileged": True}, "privileged"),
        ({"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]}, "sysctls"),
        ({"seLinuxOptions": {"level": "s0"}}, "seLinuxOptions"),
        ({"runAsUser": 0}, "runAsUser"),
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
    assert "runAsUser, runAsGroup, fsGroup, fsGroupChangePolicy, supplementalGroups" in message
