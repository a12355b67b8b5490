"""Queueing and priority on a shared cluster: every pod carries Kueue's queue label, the
trainer gang is one Kueue pod group (new per gang restart, never retried in place), the
engines and the proxy are admitted one pod at a time, and `priorityClassName` reaches every
pod. Kueue's names are checked against its "Run Plain Pods" page (kubernetes-sigs/kueue,
`site/content/en/docs/tasks/run/plain_pods.md`): "add the "pod-group-name" label, and the
"pod-group-total-count" annotation to all members of the group, consistently" and "The target
local queue should be specified in the `metadata.labels` section of the Pod configuration". No
Kueue runs here: these tests pin what the operator renders, not what Kueue does with it."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from dressage_operator import children
from dressage_operator.children import scheduling

from dressage.api import AsyncRLJob, validate_job

from .support import CONFIG, K8S_VERSION, OWNER

# Kueue's names, spelled out as its documentation spells them (not taken from the module).
QUEUE = "kueue.x-k8s.io/queue-name"
GROUP = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"
RETRIABLE = "kueue.x-k8s.io/retriable-in-group"


def _job(scheduling_spec: dict[str, Any] | None = None, **spec: Any) -> AsyncRLJob:
    body: dict[str, Any] = {
        "model": {"source": "builtin:tiny"},
        "trainer": {"nodes": 3, "gpusPerNode": 1},
        "inference": {"replicas": 2},
        "storage": {"persistentVolumeClaim": "shared"},
        **spec,
    }
    if scheduling_spec is not None:
        body["scheduling"] = scheduling_spec
    return validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": OWNER.name},
            "spec": body,
        }
    )


def _pods(job: AsyncRLJob, gang: int = 0) -> dict[str, list[dict[str, Any]]]:
    deployment = children.build_proxy_deployment(job, OWNER, CONFIG)
    return {
        "trainer": children.build_trainer_pods(job, OWNER, CONFIG, gang),
        "engine": children.build_engine_pods(job, OWNER, CONFIG),
        "proxy": [deployment["spec"]["template"]],
    }


def test_the_trainer_gang_is_one_kueue_pod_group_of_its_size() -> None:
    trainers = _pods(_job({"queueName": "team-a"}), gang=0)["trainer"]
    assert len(trainers) == 3
    for pod in trainers:
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels[QUEUE] == "team-a"
        assert labels[GROUP] == "job-a-gang-0"
        assert annotations[TOTAL] == "3"
        # Never repaired in place: Kueue finishes the old group once its pods terminated.
        assert annotations[RETRIABLE] == "false"
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_a_gang_restart_is_a_new_pod_group_and_a_new_size_a_new_count() -> None:
    job = _job({"queueName": "team-a"})
    first = {p["metadata"]["labels"][GROUP] for p in _pods(job, gang=0)["trainer"]}
    second = {p["metadata"]["labels"][GROUP] for p in _pods(job, gang=1)["trainer"]}
    assert (first, second) == ({"job-a-gang-0"}, {"job-a-gang-1"})
    bigger = _job({"queueName": "team-a"}, trainer={"nodes": 4, "gpusPerNode": 1})
    counts = {p["metadata"]["annotations"][TOTAL] for p in _pods(bigger, gang=2)["trainer"]}
    assert counts == {"4"}


def test_engines_and_the_proxy_queue_one_pod_at_a_time() -> None:
    job = _job({"queueName": "team-a"})
    pods = _pods(job)
    for role in ("engine", "proxy"):
        for pod in pods[role]:
            labels = pod["metadata"]["labels"]
            assert labels[QUEUE] == "team-a", role
            assert GROUP not in labels, role
            assert TOTAL not in pod["metadata"].get("annotations", {}), role
    deployment = children.build_proxy_deployment(job, OWNER, CONFIG)
    # Kueue's Deployment integration reads the queue from the Deployment itself.
    assert deployment["metadata"]["labels"][QUEUE] == "team-a"
    assert deployment["spec"]["template"]["metadata"]["labels"][QUEUE] == "team-a"
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_without_a_queue_no_pod_carries_kueue_metadata() -> None:
    for role, pods in _pods(_job()).items():
        for pod in pods:
            keys = [*pod["metadata"]["labels"], *pod["metadata"].get("annotations", {})]
            assert not [k for k in keys if k.startswith("kueue.x-k8s.io/")], role


def test_the_priority_class_reaches_every_pod_and_a_roles_template_wins() -> None:
    job = _job(
        {"priorityClassName": "research-high"},
        inference={"replicas": 2, "template": {"priorityClassName": "serving"}},
    )
    pods = _pods(job)
    assert {p["spec"]["priorityClassName"] for p in pods["trainer"]} == {"research-high"}
    assert {p["spec"]["priorityClassName"] for p in pods["engine"]} == {"serving"}
    assert {p["spec"]["priorityClassName"] for p in pods["proxy"]} == {"research-high"}
    assert all("priorityClassName" not in p["spec"] for p in _pods(_job())["trainer"])


@pytest.mark.parametrize(
    ("field", "value"),
    [("queueName", "team a"), ("queueName", "x" * 64), ("priorityClassName", "High")],
)
def test_a_queue_or_priority_the_api_server_would_refuse_is_refused_naming_the_field(
    field: str, value: str
) -> None:
    with pytest.raises(ValueError, match=f"scheduling.{field}"):
        _job({field: value})


def test_the_group_name_fits_a_label_for_the_longest_job_name() -> None:
    name = scheduling.pod_group_name("j" * 48, 10**8)
    assert len(name) <= 63
