"""Every container the operator creates, init containers included, declares cpu and memory:
the role's `resources` where it names them, else the documented `DEFAULT_REQUESTS`; an init
container takes its main container's (never a GPU), so a namespace's compute ResourceQuota
admits every pod of every example."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dressage_operator import children
from dressage_operator.apirules.quota import quota_refusal

from dressage.api import AsyncRLJob, load_job

from .support import EXAMPLES, pod_specs

QUOTA = {
    "metadata": {"name": "compute"},
    "spec": {"hard": {"cpu": "64", "requests.memory": "1Ti", "requests.nvidia.com/gpu": "8"}},
}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def _job(**spec: Any) -> AsyncRLJob:
    """A hub model and packages: every pod stages the model, the trainer installs packages."""
    return AsyncRLJob.model_validate(
        {
            "metadata": {"name": "job-a"},
            "spec": {
                "model": {"source": "org/model"},
                "storage": {"persistentVolumeClaim": "shared"},
                "code": {"packages": ["numpy"]},
                **spec,
            },
        }
    )


@pytest.mark.parametrize("example", [*EXAMPLES, None], ids=lambda p: p.name if p else "hub")
def test_every_container_and_init_container_requests_cpu_and_memory(example: Path | None) -> None:
    job = _job() if example is None else load_job(example)
    job.spec.storage.persistent_volume_claim = "shared"
    for role, spec in pod_specs(job).items():
        for container in _containers(spec):
            requests = container["resources"].get("requests", {})
            limits = container["resources"].get("limits", {})
            for resource in children.COMPUTE_RESOURCES:
                assert resource in requests or resource in limits, (role, container["name"])
        assert quota_refusal(role, spec, [QUOTA]) is None, role


def test_a_role_without_resources_gets_the_documented_defaults() -> None:
    specs = pod_specs(_job())
    main = {role: spec["containers"][0]["resources"] for role, spec in specs.items()}
    assert main["trainer"] == {
        "requests": {"nvidia.com/gpu": "1", **children.DEFAULT_REQUESTS["trainer"]},
        "limits": {"nvidia.com/gpu": "1"},
    }
    assert main["engine"] == {
        "requests": {"nvidia.com/gpu": "1", **children.DEFAULT_REQUESTS["sglang"]},
        "limits": {"nvidia.com/gpu": "1"},
    }
    assert main["proxy"] == {"requests": children.DEFAULT_REQUESTS["proxy"]}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        # The role's own request is kept; the other resource takes the default.
        ({"requests": {"cpu": "8"}}, {"requests": {"cpu": "8", "memory": "2Gi"}}),
        # A limit alone: the API server makes the request equal to it, no default is added.
        (
            {"limits": {"memory": "64Gi"}},
            {"requests": {"cpu": "1"}, "limits": {"memory": "64Gi"}},
        ),
        (
            {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"cpu": "8", "memory": "64Gi"}},
            {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"cpu": "8", "memory": "64Gi"}},
        ),
    ],
)
def test_the_defaults_fill_only_what_the_role_leaves_out(
    resources: dict[str, Any], expected: dict[str, Any]
) -> None:
    job = _job(trainer={"gpusPerNode": 0, "resources": resources})
    (container,) = pod_specs(job)["trainer"]["containers"]
    assert container["resources"] == expected


def test_init_containers_take_the_main_containers_cpu_and_memory_but_no_gpu() -> None:
    resources = {
        "requests": {"cpu": "16", "memory": "128Gi"},
        "limits": {"memory": "128Gi", "nvidia.com/gpu": "8"},
    }
    job = _job(trainer={"gpusPerNode": 8, "resources": resources})
    spec = pod_specs(job)["trainer"]
    names = [c["name"] for c in spec["initContainers"]]
    assert names == [children.STAGE_MODEL_CONTAINER, "install-packages"]
    for init in spec["initContainers"]:
        assert init["resources"] == {
            "requests": {"cpu": "16", "memory": "128Gi"},
            "limits": {"memory": "128Gi"},
        }
    # A quota on limits.cpu: the role gives no cpu limit, so every container lacks one.
    limits_quota = {"metadata": {"name": "q"}, "spec": {"hard": {"limits.cpu": "64"}}}
    assert quota_refusal("job-a-trainer-0", spec, [limits_quota]) == (
        'pods "job-a-trainer-0" is forbidden: failed quota: q: must specify limits.cpu for: '
        "install-packages,stage-model,trainer"
    )
