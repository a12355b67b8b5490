"""The restart policy: each role's hash covers what its pods run from the job's spec, and only
that, and a changed spec replaces the pods it concerns (the trainer gang together, engines one
at a time, the proxy through its template). The proxy's hash is derived from the very settings
the proxy reads from `job.yaml`."""

from __future__ import annotations

from typing import Any

import pytest
from dressage_operator import children, naming
from dressage_operator.children import restart
from dressage_operator.observe import PodInfo
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.api import AsyncRLJob, validate_job
from dressage.api.proxy_settings import proxy_settings
from dressage.api.status import AsyncRLJobStatus, JobPhase

from ..support import CONFIG, OWNER, built_pods, cluster_job, decide_running


def _job(spec: dict[str, Any]) -> AsyncRLJob:
    return validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "job-a"},
            "spec": spec,
        }
    )


@st.composite
def _proxy_relevant_specs(draw: st.DrawFn) -> dict[str, Any]:
    """Specs that vary what the proxy reads and what it does not (the trainer's settings, the
    engine count, the model source behind a tokenizer)."""
    partial = draw(st.booleans())
    model: dict[str, Any] = {"source": draw(st.sampled_from(["/m/a", "/m/b", "builtin:tiny"]))}
    tokenizer = draw(st.sampled_from([None, "/m/tok", "/m/a"]))
    if tokenizer is not None:
        model["tokenizer"] = tokenizer
    spec: dict[str, Any] = {
        "model": model,
        "rollout": {"mode": draw(st.sampled_from(["fully_async", "partial_async"]))},
        "proxy": {
            "partialRollout": partial,
            "recordTokenVersions": draw(st.booleans()),
            "maxConcurrency": draw(st.sampled_from([256, 512])),
        },
        "training": {"learningRate": draw(st.sampled_from([1e-5, 3e-5]))},
        "inference": {"replicas": draw(st.integers(1, 3))},
    }
    if partial or spec["rollout"]["mode"] == "partial_async":
        preempts = draw(st.sampled_from([None, 0, 2]))
        if preempts is not None:
            spec["staleness"] = {"maxPartialRolloutPreempts": preempts}
    return spec


@settings(max_examples=60, deadline=None)
@given(_proxy_relevant_specs(), _proxy_relevant_specs())
def test_the_proxy_hash_changes_exactly_when_the_proxy_settings_do(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    job_a, job_b = _job(a), _job(b)
    same_settings = proxy_settings(job_a) == proxy_settings(job_b)
    same_hash = restart.proxy_spec_hash(job_a) == restart.proxy_spec_hash(job_b)
    assert same_hash == same_settings


def test_every_hash_is_computed_from_the_job_it_is_given() -> None:
    """No cache outlives its job: a job object changed in place hashes anew."""
    job = _job({"model": {"source": "builtin:tiny"}})
    before = (
        restart.trainer_spec_hash(job),
        restart.engine_spec_hash(job),
        restart.proxy_spec_hash(job),
    )
    job.spec.training.learning_rate = 3e-5
    job.spec.inference.tensor_parallel_size = 2
    job.spec.proxy.max_concurrency = 512
    after = (
        restart.trainer_spec_hash(job),
        restart.engine_spec_hash(job),
        restart.proxy_spec_hash(job),
    )
    assert all(x != y for x, y in zip(before, after, strict=True))


def _assert_gang_restart(trainer: dict[str, Any], job: AsyncRLJob) -> None:
    pods = built_pods(cluster_job())
    plan = decide_running(job, pods)
    assert plan.create_pods == []
    assert plan.delete_pods == []
    assert (plan.status.restarts, plan.status.spec_restarts) == (1, 1)
    assert plan.status.trainer.restarts == 1
    assert plan.status.trainer.failed == 0
    assert plan.status.phase is JobPhase.RESTARTING
    assert [e.reason for e in plan.events] == ["TrainerRollout", "Restarting"]
    # Next cycle: the old gang goes and the new one is built from the new spec.
    nxt = decide_running(job, pods, plan.status)
    assert sorted(nxt.delete_pods) == ["job-a-trainer-0", "job-a-trainer-1"]
    # Once the old pods are gone, the whole new gang is created.
    engines = tuple(p for p in pods if p.role == naming.ROLE_INFERENCE)
    last = decide_running(job, engines, nxt.status)
    created = [p for p in last.create_pods if "trainer" in p["metadata"]["name"]]
    assert len(created) == trainer["nodes"]
    assert {p["metadata"]["labels"][naming.LABEL_GANG] for p in created} == {"1"}


@pytest.mark.parametrize(
    "trainer",
    [
        {"nodes": 3, "gpusPerNode": 0},
        {"nodes": 2, "gpusPerNode": 1},
        {"nodes": 2, "gpusPerNode": 0, "image": "registry/trainer:2"},
        {"nodes": 2, "gpusPerNode": 0, "resources": {"limits": {"memory": "8Gi"}}},
        {"nodes": 2, "gpusPerNode": 0, "template": {"env": [{"name": "X", "value": "1"}]}},
    ],
)
def test_a_changed_spec_trainer_is_a_counted_gang_restart(trainer: dict[str, Any]) -> None:
    _assert_gang_restart(trainer, cluster_job(trainer=trainer))


@pytest.mark.parametrize(
    "spec",
    [
        {"training": {"learningRate": 3e-5}},
        {"staleness": {"keepVersions": 2}},
        {"rollout": {"groupSize": 4}},
        {"inference": {"replicas": 2, "weightUpdateTimeoutSeconds": 60.0}},
    ],
    ids=["learningRate", "keepVersions", "groupSize", "weightUpdateTimeout"],
)
def test_what_the_trainer_reads_from_job_yaml_rolls_out_as_a_gang_restart(
    spec: dict[str, Any],
) -> None:
    _assert_gang_restart({"nodes": 2}, cluster_job(**spec))


def test_fewer_nodes_restart_the_gang_and_the_extra_rank_goes() -> None:
    pods = built_pods(cluster_job(trainer={"nodes": 3, "gpusPerNode": 0}))
    plan = decide_running(cluster_job(), pods)
    assert plan.status.restarts == 1
    assert "job-a-trainer-2" in plan.status.message


def test_an_unchanged_spec_and_an_engine_count_change_do_not_restart_the_gang() -> None:
    pods = built_pods(cluster_job())
    assert decide_running(cluster_job(), pods).status.restarts == 0
    # Engine URLs reach the trainer's env, but the engine count is not a trainer change.
    assert decide_running(cluster_job(inference={"replicas": 3}), pods).status.restarts == 0
    # Pods of an older operator carry no role-spec annotation: left to run.
    old = tuple(PodInfo(**{**p.__dict__, "role_spec": ""}) for p in pods)
    assert (
        decide_running(
            cluster_job(trainer={"nodes": 2, "gpusPerNode": 0, "image": "x:2"}), old
        ).status.restarts
        == 0
    )


def test_spec_restarts_do_not_spend_the_failure_budget() -> None:
    job = cluster_job(failurePolicy={"maxRestarts": 1})
    status = AsyncRLJobStatus(phase=JobPhase.RUNNING, restarts=2, spec_restarts=2)
    failed = tuple(
        PodInfo(**{**p.__dict__, "phase": "Failed", "ready": False})
        if p.name == "job-a-trainer-0"
        else p
        for p in built_pods(job, gang=2)
    )
    plan = decide_running(job, failed, status)
    assert plan.status.phase is JobPhase.RESTARTING
    assert plan.status.restarts == 3
    assert "gang restart 1/1" in plan.status.message


def test_a_changed_spec_inference_replaces_engines_one_at_a_time() -> None:
    new = cluster_job(inference={"replicas": 2, "image": "registry/sglang:2"})
    plan = decide_running(new, built_pods(cluster_job()))
    assert plan.delete_pods == ["job-a-engine-0"]
    assert [e.reason for e in plan.events] == ["EngineRollout"]
    assert plan.status.restarts == 0
    # While engine 0 is missing (being recreated), engine 1 keeps serving.
    pods = tuple(p for p in built_pods(cluster_job()) if p.name != "job-a-engine-0")
    plan = decide_running(new, pods)
    assert plan.delete_pods == []
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["job-a-engine-0"]
    # An outdated engine that is not ready anyway is replaced at once.
    unready = tuple(
        PodInfo(**{**p.__dict__, "ready": False}) if p.name == "job-a-engine-1" else p
        for p in built_pods(cluster_job())
    )
    assert decide_running(new, unready).delete_pods == ["job-a-engine-1"]
    # The weight-update timeout is the trainer's: no engine is replaced for it.
    timeout = cluster_job(inference={"replicas": 2, "weightUpdateTimeoutSeconds": 5.0})
    assert not [
        n for n in decide_running(timeout, built_pods(cluster_job())).delete_pods if "engine" in n
    ]
    # The model's dtype is on the engines' command line: they are replaced.
    # (The trainer reads it too: here its gang already runs the new spec.)
    dtype = cluster_job(model={"source": "builtin:tiny", "dtype": "float32"})
    trainers = tuple(p for p in built_pods(dtype) if p.role == naming.ROLE_TRAINER)
    engines = tuple(p for p in built_pods(cluster_job()) if p.role == naming.ROLE_INFERENCE)
    assert decide_running(dtype, trainers + engines).delete_pods == ["job-a-engine-0"]


def test_what_the_proxy_reads_from_job_yaml_changes_its_pod_template() -> None:
    def template(job: AsyncRLJob) -> dict[str, Any]:
        deployment = children.build_proxy_deployment(job, OWNER, CONFIG)
        return deployment["spec"]["template"]  # type: ignore[no-any-return]

    base = template(cluster_job())
    assert template(cluster_job(proxy={"maxConcurrency": 512})) != base
    assert template(cluster_job(rollout={"mode": "partial_async"})) != base
    # Neither the trainer's settings nor the engine count restart the proxy.
    assert template(cluster_job(training={"learningRate": 3e-5})) == base


def test_a_field_set_to_its_default_is_no_change() -> None:
    """So a field added to the model with a default restarts no running job at an upgrade."""
    pods = built_pods(cluster_job())
    explicit = cluster_job(
        training={"learningRate": 1e-5}, inference={"replicas": 2, "image": None}
    )
    assert children.trainer_spec_hash(explicit) == children.trainer_spec_hash(cluster_job())
    assert children.engine_spec_hash(explicit) == children.engine_spec_hash(cluster_job())
    plan = decide_running(explicit, pods)
    assert plan.status.restarts == 0
    assert plan.delete_pods == []
