"""Pure parts of spec rollouts, drift correction and limits: which pods a changed spec
replaces, what counts as drift of a live child (and what, set by the API server, does not),
and how the cluster's limits refuse a job."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from dressage_operator import children, drift, naming
from dressage_operator.config import OperatorConfig
from dressage_operator.decide import decide
from dressage_operator.limits import DEFAULT_LIMITS, LIMITS, limit_errors, parse_limits
from dressage_operator.observe import PodInfo, pod_info
from dressage_operator.plan import Applied, ChildResult, Observed
from dressage_operator.settle import settle
from dressage_operator.validation import spec_errors

from dressage.api import AsyncRLJob, validate_job
from dressage.api.crd import render_crd
from dressage.api.status import AsyncRLJobStatus, JobPhase

from .test_decide import NOW, OWNER

CONFIG = OperatorConfig()


def _job(**spec: Any) -> AsyncRLJob:
    base: dict[str, Any] = {
        "model": {"source": "builtin:tiny"},
        "trainer": {"nodes": 2, "gpusPerNode": 0},
        "inference": {"replicas": 2},
        "storage": {"persistentVolumeClaim": "shared"},
    }
    base.update(spec)
    body = {"apiVersion": "dressage.io/v1alpha1", "kind": "AsyncRLJob"}
    return validate_job({**body, "metadata": {"name": "job-a"}, "spec": base})


def _pods_of(job: AsyncRLJob, gang: int = 0, ready: bool = True) -> tuple[PodInfo, ...]:
    """The pods the builders make for `job`, as the pod index would summarise them."""
    bodies = children.build_trainer_pods(job, OWNER, CONFIG, gang)
    bodies += children.build_engine_pods(job, OWNER, CONFIG)
    pods = []
    for body in bodies:
        body = copy.deepcopy(body)
        body["metadata"]["uid"] = body["metadata"]["name"] + "-uid"
        condition = {"type": "Ready", "status": "True" if ready else "False"}
        body["status"] = {"phase": "Running", "conditions": [condition]}
        info = pod_info(body)
        assert info is not None
        pods.append(info)
    return tuple(pods)


def _decide(job: AsyncRLJob, pods: tuple[PodInfo, ...], status: AsyncRLJobStatus | None = None):  # type: ignore[no-untyped-def]
    status = status or AsyncRLJobStatus(phase=JobPhase.RUNNING)
    obs = Observed(generation=2, status=status, now=NOW, pods=pods)
    return decide(job, OWNER, CONFIG, obs)


# --- spec rollouts -------------------------------------------------------------------------


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
    _assert_gang_restart(trainer, _job(trainer=trainer))


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
    _assert_gang_restart({"nodes": 2}, _job(**spec))


def _assert_gang_restart(trainer: dict[str, Any], job: AsyncRLJob) -> None:
    pods = _pods_of(_job())
    plan = _decide(job, pods)
    assert plan.create_pods == []
    assert plan.delete_pods == []
    assert (plan.status.restarts, plan.status.spec_restarts) == (1, 1)
    assert plan.status.trainer.restarts == 1
    assert plan.status.trainer.failed == 0
    assert plan.status.phase is JobPhase.RESTARTING
    assert [e.reason for e in plan.events] == ["TrainerRollout", "Restarting"]
    # Next cycle: the old gang goes and the new one is built from the new spec.
    nxt = _decide(job, pods, plan.status)
    assert sorted(nxt.delete_pods) == ["job-a-trainer-0", "job-a-trainer-1"]
    # Once the old pods are gone, the whole new gang is created.
    engines = tuple(p for p in pods if p.role == naming.ROLE_INFERENCE)
    last = _decide(job, engines, nxt.status)
    created = [p for p in last.create_pods if "trainer" in p["metadata"]["name"]]
    assert len(created) == trainer["nodes"]
    assert {p["metadata"]["labels"][naming.LABEL_GANG] for p in created} == {"1"}


def test_fewer_nodes_restart_the_gang_and_the_extra_rank_goes() -> None:
    pods = _pods_of(_job(trainer={"nodes": 3, "gpusPerNode": 0}))
    plan = _decide(_job(), pods)
    assert plan.status.restarts == 1
    assert "job-a-trainer-2" in plan.status.message


def test_an_unchanged_spec_and_an_engine_count_change_do_not_restart_the_gang() -> None:
    pods = _pods_of(_job())
    assert _decide(_job(), pods).status.restarts == 0
    # Engine URLs reach the trainer's env, but the engine count is not a trainer change.
    assert _decide(_job(inference={"replicas": 3}), pods).status.restarts == 0
    # Pods of an older operator carry no role-spec annotation: left to run.
    old = tuple(PodInfo(**{**p.__dict__, "role_spec": ""}) for p in pods)
    assert (
        _decide(_job(trainer={"nodes": 2, "gpusPerNode": 0, "image": "x:2"}), old).status.restarts
        == 0
    )


def test_spec_restarts_do_not_spend_the_failure_budget() -> None:
    job = _job(failurePolicy={"maxRestarts": 1})
    status = AsyncRLJobStatus(phase=JobPhase.RUNNING, restarts=2, spec_restarts=2)
    failed = tuple(
        PodInfo(**{**p.__dict__, "phase": "Failed", "ready": False})
        if p.name == "job-a-trainer-0"
        else p
        for p in _pods_of(job, gang=2)
    )
    plan = _decide(job, failed, status)
    assert plan.status.phase is JobPhase.RESTARTING
    assert plan.status.restarts == 3
    assert "gang restart 1/1" in plan.status.message


def test_a_changed_spec_inference_replaces_engines_one_at_a_time() -> None:
    new = _job(inference={"replicas": 2, "image": "registry/sglang:2"})
    plan = _decide(new, _pods_of(_job()))
    assert plan.delete_pods == ["job-a-engine-0"]
    assert [e.reason for e in plan.events] == ["EngineRollout"]
    assert plan.status.restarts == 0
    # While engine 0 is missing (being recreated), engine 1 keeps serving.
    pods = tuple(p for p in _pods_of(_job()) if p.name != "job-a-engine-0")
    plan = _decide(new, pods)
    assert plan.delete_pods == []
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["job-a-engine-0"]
    # An outdated engine that is not ready anyway is replaced at once.
    unready = tuple(
        PodInfo(**{**p.__dict__, "ready": False}) if p.name == "job-a-engine-1" else p
        for p in _pods_of(_job())
    )
    assert _decide(new, unready).delete_pods == ["job-a-engine-1"]
    # The weight-update timeout is the trainer's: no engine is replaced for it.
    timeout = _job(inference={"replicas": 2, "weightUpdateTimeoutSeconds": 5.0})
    assert not [n for n in _decide(timeout, _pods_of(_job())).delete_pods if "engine" in n]
    # The model's dtype is on the engines' command line: they are replaced.
    # (The trainer reads it too: here its gang already runs the new spec.)
    dtype = _job(model={"source": "builtin:tiny", "dtype": "float32"})
    trainers = tuple(p for p in _pods_of(dtype) if p.role == naming.ROLE_TRAINER)
    engines = tuple(p for p in _pods_of(_job()) if p.role == naming.ROLE_INFERENCE)
    assert _decide(dtype, trainers + engines).delete_pods == ["job-a-engine-0"]


def test_what_the_proxy_reads_from_job_yaml_changes_its_pod_template() -> None:
    def template(job: AsyncRLJob) -> dict[str, Any]:
        deployment = children.build_proxy_deployment(job, OWNER, CONFIG)
        return deployment["spec"]["template"]  # type: ignore[no-any-return]

    base = template(_job())
    assert template(_job(proxy={"maxConcurrency": 512})) != base
    assert template(_job(rollout={"mode": "partial_async"})) != base
    # Neither the trainer's settings nor the engine count restart the proxy.
    assert template(_job(training={"learningRate": 3e-5})) == base


def test_a_cycle_creates_at_most_max_creates_per_cycle_and_comes_back_at_once() -> None:
    config = OperatorConfig(max_creates_per_cycle=3)
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(_job(inference={"replicas": 10}), OWNER, config, obs)
    assert [p["metadata"]["name"] for p in plan.create_pods] == [
        "job-a-trainer-0",
        "job-a-trainer-1",
        "job-a-engine-0",
    ]
    assert plan.requeue_after == 0.0


# --- drift ---------------------------------------------------------------------------------


def _defaulted_deployment(desired: dict[str, Any]) -> dict[str, Any]:
    """The proxy Deployment as a real API server returns it: defaults filled in, quantities
    normalised, metadata and status added by the server and the Deployment controller."""
    live = copy.deepcopy(desired)
    live["metadata"].update(uid="x", resourceVersion="7", generation=1)
    live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1"
    live["spec"].update(progressDeadlineSeconds=600, revisionHistoryLimit=10)
    pod = live["spec"]["template"]["spec"]
    pod.update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler")
    for container in pod["containers"]:
        container.update(
            imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log"
        )
        for port in container["ports"]:
            port["protocol"] = "TCP"
        container["readinessProbe"].update(timeoutSeconds=1, successThreshold=1)
        container["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    for volume in pod["volumes"]:
        if "configMap" in volume:
            volume["configMap"]["defaultMode"] = 420
    live["status"] = {"replicas": 1, "readyReplicas": 1}
    return live


def test_what_the_api_server_defaults_or_normalises_is_not_drift() -> None:
    job = _job(proxy={"resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}}})
    desired = children.build_proxy_deployment(job, OWNER, CONFIG)
    live = _defaulted_deployment(desired)
    assert drift.drift(desired, live) == []
    service = children.build_engine_service(job, OWNER)
    live_service = copy.deepcopy(service)
    live_service["spec"].update(type="ClusterIP", sessionAffinity="None", ipFamilies=["IPv4"])
    live_service["spec"]["ports"][0]["protocol"] = "TCP"
    live_service["metadata"]["labels"]["added-by-someone"] = "yes"
    assert drift.drift(service, live_service) == []


def test_a_hand_scaled_or_edited_child_is_drift_and_the_correction_sets_it_back() -> None:
    job = _job()
    desired = children.build_proxy_deployment(job, OWNER, CONFIG)
    live = _defaulted_deployment(desired)
    live["spec"]["replicas"] = 3
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "someone/else:1"
    assert drift.drift(desired, live) == [
        "spec.replicas",
        "spec.template.spec.containers[proxy].image",
    ]
    # A sidecar or an env var injected by a mutating webhook is not drift; a removed one is.
    injected = _defaulted_deployment(desired)
    pod = injected["spec"]["template"]["spec"]
    pod["containers"].append({"name": "istio-proxy", "image": "istio/proxyv2"})
    pod["containers"][0]["env"].insert(0, {"name": "INJECTED", "value": "1"})
    assert drift.drift(desired, injected) == []
    del pod["containers"][0]["env"][1]
    assert drift.drift(desired, injected) == [
        "spec.template.spec.containers[proxy].env[DRESSAGE_JOB_CONFIG]"
    ]
    config_map = children.build_config_map(job, OWNER)
    edited = copy.deepcopy(config_map)
    edited["data"] = {**config_map["data"], naming.CONFIG_KEY: "edited: true\n", "extra": "x"}
    del edited["metadata"]["labels"][naming.LABEL_ROLE]
    assert drift.drift(config_map, edited) == [
        f"metadata.labels.{naming.LABEL_ROLE}",
        f"data.{naming.CONFIG_KEY}",
        "data.extra",
    ]
    patch = drift.correction(config_map, edited)
    assert patch["data"] == {**config_map["data"], "extra": None}


def test_a_corrected_child_posts_a_drift_event_and_still_counts_as_applied() -> None:
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(_job(), OWNER, CONFIG, obs)
    result = ChildResult(
        "Deployment", "job-a-proxy", "patch", Applied.CORRECTED, message="spec.replicas"
    )
    out = settle(plan, obs, CONFIG, [result])
    (event,) = [e for e in out.events if e.reason == "DriftCorrected"]
    assert event.type == "Warning"
    assert "Deployment job-a-proxy" in event.message
    assert "spec.replicas" in event.message
    applied = next(c for c in out.status.conditions if c.type == "ChildrenApplied")
    assert applied.status == "True"


# --- limits --------------------------------------------------------------------------------


def _body(**spec: Any) -> dict[str, Any]:
    return _job(**spec).to_wire()


def test_the_default_limits_refuse_a_large_job_naming_the_field() -> None:
    job, errors = spec_errors(_body(inference={"replicas": 65}), "ns/job-a")
    assert job is not None
    assert errors == ()
    (over,) = limit_errors(job.spec, CONFIG.limits)  # ...over this cluster's limit
    assert over[0] == "spec.inference.replicas"
    assert "65 is above this cluster's limit of 64" in over[1]
    assert "limits.inferenceReplicas" in over[1]
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW, limit_errors=(over,))
    plan = decide(job, OWNER, CONFIG, obs)
    assert plan.invalid
    assert plan.create_pods == []
    cond = next(c for c in plan.status.conditions if c.type == "SpecValid")
    assert (cond.status, cond.reason) == ("False", "LimitExceeded")
    assert cond.message.startswith("spec.inference.replicas: 65 is above")
    # Brought under the limit, the job starts over.
    again = Observed(generation=2, status=plan.status, now=NOW)
    fixed = decide(_job(inference={"replicas": 64}), OWNER, CONFIG, again)
    assert fixed.status.phase is JobPhase.PENDING
    assert len(fixed.create_pods) == CONFIG.max_creates_per_cycle  # 66 pods: 50 this cycle


def test_every_limit_bounds_its_field_and_is_raised_from_the_environment() -> None:
    raised = OperatorConfig.from_env(
        {"DRESSAGE_OPERATOR_LIMITS": json.dumps({"inferenceReplicas": 500, "trainerNodes": 40})}
    )
    assert raised.limits["inferenceReplicas"] == 500
    assert raised.limits["gpusPerNode"] == DEFAULT_LIMITS["gpusPerNode"]
    big = _job(inference={"replicas": 500}, trainer={"nodes": 40, "gpusPerNode": 0})
    assert limit_errors(big.spec, raised.limits) == []
    assert [f for f, _ in limit_errors(big.spec, CONFIG.limits)] == [
        "spec.inference.replicas",
        "spec.trainer.nodes",
    ]
    crd = yaml.safe_load(render_crd())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for limit in LIMITS:
        _, section, name = limit.field.split(".")
        maximum = spec["properties"][section]["properties"][name]["maximum"]
        assert limit.default <= maximum, limit.key  # the CRD carries a generous static maximum


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"engines": 5}', "unknown limit 'engines'"),
        ('{"trainerNodes": 0}', "trainerNodes must be a positive integer"),
        ('{"trainerNodes": "9"}', "trainerNodes must be a positive integer"),
        ("[1]", "not a JSON object"),
        ("{", "not a JSON object"),
    ],
)
def test_bad_limits_are_refused_at_startup_naming_the_key(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="DRESSAGE_OPERATOR_LIMITS") as info:
        parse_limits(text)
    assert problem in str(info.value)


def test_the_model_and_the_crd_refuse_what_is_above_the_static_maximum() -> None:
    _, errors = spec_errors(
        _body() | {"spec": {**_body()["spec"], "inference": {"replicas": 5000}}}, "ns/a"
    )
    assert [f for f, _ in errors] == ["spec.inference.replicas"]


def test_a_field_set_to_its_default_is_no_change() -> None:
    """So a field added to the model with a default restarts no running job at an upgrade."""
    pods = _pods_of(_job())
    explicit = _job(training={"learningRate": 1e-5}, inference={"replicas": 2, "image": None})
    assert children.trainer_spec_hash(explicit) == children.trainer_spec_hash(_job())
    assert children.engine_spec_hash(explicit) == children.engine_spec_hash(_job())
    plan = _decide(explicit, pods)
    assert plan.status.restarts == 0
    assert plan.delete_pods == []
