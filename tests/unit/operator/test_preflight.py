"""A job's children are checked as the API server would check them before any is created, and
every problem is named by the job field it comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from dressage_operator.children_check import child_errors, self_check
from dressage_operator.config import OperatorConfig
from dressage_operator.validation import spec_errors

from dressage.api import validate_job
from tests.manifests import REFUSED_CHILDREN, refused_children

from .support import OWNER, cluster_job

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))
CONFIG = OperatorConfig(network_policies=True)


def _errors(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    job, errors = spec_errors(manifest, "test")
    assert job is not None
    assert not errors, errors  # the job model accepts it: only its children are refused
    return child_errors(job, OWNER, CONFIG)


@pytest.mark.parametrize(("name", "field"), REFUSED_CHILDREN.items(), ids=list(REFUSED_CHILDREN))
def test_each_job_whose_children_the_api_server_refuses_is_refused_naming_its_field(
    name: str, field: str
) -> None:
    errors = _errors(refused_children()[name])
    assert [f for f, _ in errors] == [field], errors
    ((_, message),) = errors
    assert "(the API server would refuse " in message


def test_what_the_jobs_get_reads_as_the_api_server_would_say_it() -> None:
    said = {name: _errors(job)[0][1] for name, job in refused_children().items()}
    assert said["requests-above-limits"].startswith(
        'Invalid value: "64Gi": must be less than or equal to memory limit of 32Gi'
    )
    assert said["bad-toleration-operator"].startswith(
        'Unsupported value: "Equals": supported values: "Equal", "Exists"'
    )
    assert said["clashing-mount-path"].startswith('Invalid value: "/dressage": must be unique')
    assert said["label-value-too-long"].endswith(
        "must be no more than 63 bytes (the API server would refuse Pod job-a-trainer-0)"
    )
    assert said["gpu-request-over-limit"].startswith(
        'Invalid value: "2": must be equal to nvidia.com/gpu limit of 1'
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes(example: Path) -> None:
    for doc in yaml.safe_load_all(example.read_text(encoding="utf-8")):
        if doc and doc.get("kind") == "AsyncRLJob":
            assert child_errors(validate_job(doc), OWNER, CONFIG) == []


def test_a_job_using_every_pass_through_field_correctly_passes() -> None:
    template = {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {"dressage.io/role": "inference"}},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        },
        "priorityClassName": "training-high",
        "imagePullSecrets": ["registry"],
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        "labels": {"team": "rl"},
        "annotations": {"example.com/owner": "rl-team"},
    }
    job = cluster_job(
        model={"source": "org/model", "tokenSecret": {"name": "hf", "key": "token"}},
        trainer={"nodes": 2, "gpusPerNode": 8, "template": template,
                 "resources": {"requests": {"cpu": "32", "memory": "256Gi"}}},
        inference={"replicas": 2, "tensorParallelSize": 2, "weightSync": "distributed",
                   "template": template},
        proxy={"template": template, "tokenSecret": {"name": "proxy", "key": "token"}},
        code={"path": "task", "packages": ["math-verify==0.8.0"]},
    )  # fmt: skip
    assert child_errors(job, OWNER, CONFIG) == []


def test_a_deep_affinity_mistake_is_named_by_its_full_path() -> None:
    expressions = [{"key": "nvidia.com/gpu.product", "operator": "in", "values": ["H100"]}]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }
    job = cluster_job(trainer={"nodes": 1, "template": {"affinity": affinity}})
    ((field, message),) = child_errors(job, OWNER, CONFIG)
    assert field == (
        "spec.trainer.template.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator"
    )
    assert message.startswith('Invalid value: "in": not a valid selector operator')


def test_a_typo_in_a_passed_through_field_is_an_unknown_field_not_dropped() -> None:
    """The API server would drop `operater` and admit a pod that tolerates nothing."""
    tolerations = [{"key": "nvidia.com/gpu", "operater": "Exists", "effect": "NoSchedule"}]
    job = cluster_job(inference={"replicas": 1, "template": {"tolerations": tolerations}})
    fields = {f: m for f, m in child_errors(job, OWNER, CONFIG)}
    assert fields["spec.inference.template.tolerations[0].operater"] == (
        "unknown field 'operater' (checked against the Kubernetes 1.33 schema of Pod "
        "job-a-engine-0)"
    )


def test_a_problem_of_the_operators_own_making_names_the_child_and_its_field() -> None:
    """A job name the operator's validation refuses (too long for the pods' host names) is
    also what the API server would refuse in the trainer pod's `spec.hostname`."""
    job = cluster_job()
    job.metadata.name = "a" * 60
    owner = type(OWNER)(name=job.metadata.name, namespace="ns", uid="u")
    fields = [f for f, _ in child_errors(job, owner, CONFIG)]
    assert f"Pod {'a' * 60}-trainer-0 spec.hostname" in fields


def test_the_same_problem_in_several_children_is_named_once() -> None:
    template = {"labels": {"team": "x" * 64}}
    job = cluster_job(trainer={"nodes": 2, "template": template})
    assert [f for f, _ in child_errors(job, OWNER, CONFIG)] == [
        "spec.trainer.template.labels[team]"
    ]


def test_the_self_check_of_an_installation_passes() -> None:
    self_check()


def test_a_queued_job_with_a_priority_passes() -> None:
    """Kueue's labels and annotations and the job's priority class are what the API server
    accepts on every child (the job model checks the queue name and the class's syntax)."""
    job = cluster_job(
        trainer={"nodes": 2, "gpusPerNode": 8},
        scheduling={"queueName": "team-a", "priorityClassName": "research-high"},
    )
    assert child_errors(job, OWNER, CONFIG) == []
