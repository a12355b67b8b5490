"""On a cluster the top line tells the truth: a job the API server would refuse a child of is
`SpecValid=False` naming the job's field before anything exists, and so is a job whose task or
image would only fail once its pods run. The operator against the API emulation; the jobs are
`tests/manifests/refused-children.yaml`, as a user writes them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from dressage_testkit.kube import EmulatedCluster

from tests.manifests import REFUSED_CHILDREN, refused_children

from .conftest import Operator
from .jobs import delete_jobs, job_manifest, pods_of, status_of
from .waiting import wait_until


@pytest.fixture(autouse=True)
def _delete_jobs_afterwards(cluster: EmulatedCluster) -> Iterator[None]:
    yield
    delete_jobs(cluster)


def _conditions(c: EmulatedCluster, job: str) -> dict[str, dict[str, Any]]:
    return {x["type"]: x for x in status_of(c, job).get("conditions", [])}


def _children_of(c: EmulatedCluster, job: str) -> list[str]:
    kinds = [("v1", "pods"), ("apps/v1", "deployments"), ("v1", "configmaps"), ("v1", "services")]
    return [
        f"{plural}/{o['metadata']['name']}"
        for api_version, plural in kinds
        for o in c.items(api_version, plural)
        if o["metadata"].get("labels", {}).get("dressage.io/job") == job
    ]


def _failed(c: EmulatedCluster, job: str) -> dict[str, Any]:
    status: dict[str, Any] = wait_until(
        lambda: status_of(c, job).get("phase") == "Failed" and status_of(c, job),
        timeout=30,
        what=f"{job} Failed",
    )
    return status


def test_every_job_the_api_server_would_refuse_a_child_of_is_refused_before_anything_exists(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    jobs = refused_children()
    for manifest in jobs.values():
        c.create(manifest)
    for name, field in REFUSED_CHILDREN.items():
        status = _failed(c, name)
        spec_valid = _conditions(c, name)["SpecValid"]
        assert (spec_valid["status"], spec_valid["reason"]) == ("False", "InvalidSpec")
        assert spec_valid["message"].startswith(f"{field}: "), spec_valid["message"]
        # The top line `kubectl get arj` prints: phase and message.
        assert status["message"].startswith(f"invalid spec: {field}: ")
        assert _children_of(c, name) == [], name
        assert c.refusals("Pod", f"{name}-trainer-0") == 0


def test_a_fixed_job_starts(cluster: EmulatedCluster, operator: Operator) -> None:
    c = cluster
    manifest = copy.deepcopy(refused_children()["bad-toleration-operator"])
    c.create(manifest)
    _failed(c, "bad-toleration-operator")
    toleration = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}
    fixed = {"spec": {"trainer": {"template": {"tolerations": [toleration]}}}}
    c.patch(c.job_path("bad-toleration-operator"), fixed)
    wait_until(
        lambda: status_of(c, "bad-toleration-operator").get("phase") == "Pending",
        timeout=30,
        what="Pending",
    )
    wait_until(
        lambda: len(pods_of(c, "bad-toleration-operator")) == 2, timeout=30, what="pods created"
    )
    assert _conditions(c, "bad-toleration-operator")["SpecValid"]["status"] == "True"


@pytest.mark.parametrize(
    ("name", "spec", "field", "says"),
    [
        (
            "unknown-task",
            {"task": {"name": "arithmatic"}},
            "spec.task.name",
            "unknown task 'arithmatic': did you mean 'arithmetic'?",
        ),
        (
            "upper-case-image",
            {"trainer": {"nodes": 1, "image": "ghcr.io/Dressage/dressage-runtime:0.1.0"}},
            "spec.trainer.image",
            "repository name 'Dressage/dressage-runtime' must be lower case",
        ),
        (
            "deep-affinity",
            {
                "trainer": {
                    "nodes": 1,
                    "template": {
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {"matchExpressions": [{"key": "gpu", "operator": "in"}]}
                                    ]
                                }
                            }
                        }
                    },
                }
            },
            "spec.trainer.template.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring"
            "Execution.nodeSelectorTerms[0].matchExpressions[0].operator",
            'Invalid value: "in": not a valid selector operator',
        ),
    ],
)
def test_what_would_fail_only_at_run_time_is_refused_naming_the_field(
    cluster: EmulatedCluster,
    operator: Operator,
    name: str,
    spec: dict[str, Any],
    field: str,
    says: str,
) -> None:
    c = cluster
    c.create(job_manifest(name, **spec))
    _failed(c, name)
    message = _conditions(c, name)["SpecValid"]["message"]
    assert f"{field}: {says}" in message, message
    assert _children_of(c, name) == []
