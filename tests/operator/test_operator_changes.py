"""Spec changes, drift and limits, with the operator as a real kopf process against the
Kubernetes API emulation (see test_operator_e2e.py for what the emulation does and does not).

The operator here runs with raised limits (`DRESSAGE_OPERATOR_LIMITS`) and a small
`DRESSAGE_OPERATOR_MAX_CREATES_PER_CYCLE`, as a cluster admin would set them in the chart, and a
resync of 1 s: the interval at which the ConfigMap and Services are compared with the job.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from dressage_operator.limits import DEFAULT_LIMITS
from dressage_testkit.kube import EmulatedCluster

from .conftest import Operator
from .jobs import delete_jobs, job_manifest, pods_of, run_all, set_phase, status_of, uids
from .waiting import wait_until

RAISED_ENGINES = 400
CREATES_PER_CYCLE = 20


@pytest.fixture(scope="module")
def operator_settings() -> dict[str, str]:
    """The `operator` fixture's settings in this module (see the module docstring)."""
    return {
        # The ConfigMap and the Services are compared with the job once per resync interval.
        "DRESSAGE_OPERATOR_RESYNC_SECONDS": "1",
        "DRESSAGE_OPERATOR_LIMITS": json.dumps({"inferenceReplicas": RAISED_ENGINES}),
        "DRESSAGE_OPERATOR_MAX_CREATES_PER_CYCLE": str(CREATES_PER_CYCLE),
    }


@pytest.fixture(autouse=True)
def _delete_jobs_afterwards(cluster: EmulatedCluster) -> Iterator[None]:
    """Delete the test's jobs and every child, as the garbage collector would."""
    yield
    delete_jobs(cluster)


def _trainers(c: EmulatedCluster, job: str) -> dict[str, dict[str, Any]]:
    return {n: p for n, p in pods_of(c, job).items() if "-trainer-" in n}


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def _gang_is(c: EmulatedCluster, job: str, nodes: int, gang: int) -> bool:
    trainers = _trainers(c, job)
    return len(trainers) == nodes and all(
        p["metadata"]["labels"]["dressage.io/gang"] == str(gang) and _env(p)["NNODES"] == str(nodes)
        for p in trainers.values()
    )


def _events(c: EmulatedCluster, job: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in c.items("v1", "events")
        if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == job
    ]


def _condition(c: EmulatedCluster, job: str, ctype: str) -> dict[str, Any]:
    conds: dict[str, dict[str, Any]] = {
        x["type"]: x for x in status_of(c, job).get("conditions", [])
    }
    return conds.get(ctype, {})


def test_trainer_nodes_2_3_2_restart_the_gang_with_the_new_size(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("resize", proxy={"replicas": 1}))
    before = uids(run_all(c, "resize"))

    c.patch(c.job_path("resize"), {"spec": {"trainer": {"nodes": 3}}})
    wait_until(lambda: _gang_is(c, "resize", 3, 1), what="3 trainer pods of gang 1, NNODES=3")
    after = uids(pods_of(c, "resize"))
    assert after["resize-trainer-0"] != before["resize-trainer-0"]
    assert after["resize-engine-0"] == before["resize-engine-0"]  # engines untouched
    status = status_of(c, "resize")
    assert (status["restarts"], status["specRestarts"]) == (1, 1)
    assert status["trainer"]["restarts"] == 1
    assert status["trainer"]["failed"] == 0
    assert status["phase"] == "Restarting"
    assert "what the trainer runs changed" in status["message"]
    wait_until(lambda: _events(c, "resize", "TrainerRollout"), what="TrainerRollout Event")

    for name in _trainers(c, "resize"):
        set_phase(c, name, "Running")
    wait_until(lambda: status_of(c, "resize").get("phase") == "Running", what="Running with 3")
    assert status_of(c, "resize")["trainer"]["desired"] == 3

    c.patch(c.job_path("resize"), {"spec": {"trainer": {"nodes": 2}}})
    wait_until(lambda: _gang_is(c, "resize", 2, 2), what="2 trainer pods of gang 2, NNODES=2")
    status = status_of(c, "resize")
    assert (status["restarts"], status["specRestarts"]) == (2, 2)
    assert status["observedGeneration"] == 3


def test_a_trainer_image_change_is_a_gang_restart_outside_the_failure_budget(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("reimage", failurePolicy={"maxRestarts": 0}))
    run_all(c, "reimage")
    c.patch(c.job_path("reimage"), {"spec": {"trainer": {"image": "registry/trainer:2"}}})

    def new_image() -> bool:
        trainers = _trainers(c, "reimage")
        return _gang_is(c, "reimage", 2, 1) and all(
            p["spec"]["containers"][0]["image"] == "registry/trainer:2" for p in trainers.values()
        )

    wait_until(new_image, what="a gang on the new image")
    assert status_of(c, "reimage")["phase"] == "Restarting"  # not Failed: maxRestarts is 0


def test_an_engine_image_change_replaces_the_engines_one_by_one(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("roll"))
    before = uids(run_all(c, "roll"))
    c.patch(c.job_path("roll"), {"spec": {"inference": {"image": "registry/sglang:2"}}})

    def image(name: str) -> str:
        pod = pods_of(c, "roll").get(name)
        return "" if pod is None else str(pod["spec"]["containers"][0]["image"])

    wait_until(lambda: image("roll-engine-0") == "registry/sglang:2", what="engine 0 replaced")
    # Engine 1 keeps serving until the new engine 0 is ready.
    assert uids(pods_of(c, "roll"))["roll-engine-1"] == before["roll-engine-1"]
    set_phase(c, "roll-engine-0", "Running")
    wait_until(lambda: image("roll-engine-1") == "registry/sglang:2", what="engine 1 replaced")
    after = uids(pods_of(c, "roll"))
    assert after["roll-trainer-0"] == before["roll-trainer-0"]  # the trainer is untouched
    assert status_of(c, "roll")["restarts"] == 0
    wait_until(
        lambda: (
            {
                n
                for n in ("roll-engine-0", "roll-engine-1")
                for e in _events(c, "roll", "EngineRollout")
                if f"engine pod {n} replaced" in e["message"]
            }
            == {"roll-engine-0", "roll-engine-1"}
        ),
        what="an EngineRollout Event for each engine",
    )


def test_a_hand_scaled_proxy_deployment_is_set_back(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("scaled"))
    path = c.path("apps/v1", "deployments", "scaled-proxy")
    wait_until(lambda: c.get(path), what="proxy Deployment")
    c.patch(path, {"spec": {"replicas": 3}})
    wait_until(lambda: (c.get(path) or {}).get("spec", {}).get("replicas") == 1, what="replicas 1")
    event, *_ = wait_until(lambda: _events(c, "scaled", "DriftCorrected"), what="Event")
    assert event["type"] == "Warning"
    assert "Deployment scaled-proxy" in event["message"]
    assert "spec.replicas" in event["message"]


def test_a_hand_edited_config_map_and_service_are_set_back(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("edited"))
    cm_path = c.path("v1", "configmaps", "edited-config")
    svc_path = c.path("v1", "services", "edited-engine")
    wait_until(lambda: c.get(cm_path) and c.get(svc_path), what="ConfigMap and Service")
    wait_until(lambda: len(pods_of(c, "edited")) == 4, what="pods")
    original = c.get(cm_path)["data"]  # type: ignore[index]
    ports = c.get(svc_path)["spec"]["ports"]  # type: ignore[index]
    c.patch(cm_path, {"data": {"job.yaml": "edited: by hand\n", "extra": "x"}})
    wait_until(lambda: c.get(cm_path)["data"] == original, what="ConfigMap set back")  # type: ignore[index]
    c.patch(svc_path, {"spec": {"ports": [{"name": "http", "port": 1234}]}})
    wait_until(lambda: c.get(svc_path)["spec"]["ports"] == ports, what="Service set back")  # type: ignore[index]
    messages = wait_until(
        lambda: (
            len(events := _events(c, "edited", "DriftCorrected")) >= 2
            and " ".join(e["message"] for e in events)
        ),
        what="two DriftCorrected Events",
    )
    assert "ConfigMap edited-config" in messages
    assert "data.extra" in messages
    assert "Service edited-engine" in messages
    assert "spec.ports" in messages


def test_a_job_over_the_limit_is_refused_naming_the_field_and_starts_once_under_it(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("toomany", inference={"replicas": RAISED_ENGINES + 1}))
    cond = wait_until(
        lambda: (
            _condition(c, "toomany", "SpecValid").get("status") == "False"
            and _condition(c, "toomany", "SpecValid")
        ),
        what="SpecValid=False",
    )
    assert cond["reason"] == "LimitExceeded"
    assert cond["message"].startswith(
        f"spec.inference.replicas: {RAISED_ENGINES + 1} is above this cluster's limit of "
        f"{RAISED_ENGINES}"
    )
    assert "limits.inferenceReplicas" in cond["message"]
    assert status_of(c, "toomany")["phase"] == "Failed"
    assert not pods_of(c, "toomany")
    # Brought under the limit, the job starts over.
    c.patch(c.job_path("toomany"), {"spec": {"inference": {"replicas": 2}}})
    wait_until(lambda: len(pods_of(c, "toomany")) == 4, what="pods once under the limit")
    # The pods are created before the cycle writes its status.
    wait_until(
        lambda: _condition(c, "toomany", "SpecValid").get("status") == "True", what="SpecValid"
    )


def test_a_small_job_gets_its_children_while_a_large_one_is_being_created(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    """The large job is at the raised limit (400 engines, above the default of 64); the
    operator creates at most 20 of its children per cycle, so the small job's cycles come in
    between instead of after all 402 pods."""
    c = cluster
    large_pods = 2 + RAISED_ENGINES
    c.create(job_manifest("large", inference={"replicas": RAISED_ENGINES}))
    wait_until(lambda: len(pods_of(c, "large")) >= CREATES_PER_CYCLE, what="large job underway")
    c.create(job_manifest("small"))
    wait_until(
        lambda: (
            len(pods_of(c, "small")) == 4 and c.get(c.path("apps/v1", "deployments", "small-proxy"))
        ),
        timeout=120,
        what="the small job's children",
    )
    still_creating = len(pods_of(c, "large"))
    assert still_creating < large_pods, f"the small job waited for all {large_pods} pods"
    wait_until(lambda: len(pods_of(c, "large")) == large_pods, timeout=120, what="large job done")
    # The large job is above the default limit and accepted under the raised one.
    assert DEFAULT_LIMITS["inferenceReplicas"] < RAISED_ENGINES
    assert _condition(c, "large", "SpecValid")["status"] == "True"
