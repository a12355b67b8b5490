"""What the API server refuses although the operator's own check passed it (here the check is
off: `DRESSAGE_OPERATOR_CHECK_CHILDREN=false`, so the API emulation refuses what the check
would have found; on a cluster: a Pod Security level, a policy webhook, a PriorityClass that
does not exist): a permanent refusal is on the top line and is not retried in a loop. A job
that has not run yet is Failed and its other children go; a running job keeps running."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from dressage_testkit.kube import ENFORCE_LABEL, EmulatedCluster

from dressage import metrics as names
from tests.manifests import REFUSED_CHILDREN, refused_children

from .conftest import Operator
from .jobs import delete_jobs, job_manifest, pods_of, run_all, set_phase, status_of
from .waiting import wait_until


@pytest.fixture(scope="module")
def operator_settings() -> dict[str, str]:
    return {"DRESSAGE_OPERATOR_CHECK_CHILDREN": "false"}


@pytest.fixture(autouse=True)
def _delete_jobs_afterwards(cluster: EmulatedCluster) -> Iterator[None]:
    yield
    delete_jobs(cluster)


def _conditions(c: EmulatedCluster, job: str) -> dict[str, dict[str, Any]]:
    return {x["type"]: x for x in status_of(c, job).get("conditions", [])}


def _events(c: EmulatedCluster, job: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in c.items("v1", "events")
        if e.get("involvedObject", {}).get("name") == job and e.get("reason") == reason
    ]


def _reconciles(operator: Operator) -> float:
    text = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics").text
    prefix = f"{names.OPERATOR_RECONCILE}{{"
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def _poke(c: EmulatedCluster, operator: Operator, job: str, value: str) -> None:
    """Wake the job's reconcile loop (a label change is an event) and wait until it ran."""
    before = _reconciles(operator)
    c.patch(c.job_path(job), {"metadata": {"labels": {"poke": value}}})
    wait_until(lambda: _reconciles(operator) > before, what="a reconcile after the poke")


def test_a_child_refused_before_the_job_ran_fails_it_and_is_not_retried(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    for manifest in refused_children().values():
        c.create(manifest)
    for name in REFUSED_CHILDREN:
        status = wait_until(
            lambda name=name: status_of(c, name).get("phase") == "Failed" and status_of(c, name),
            timeout=30,
            what=f"{name} Failed",
        )
        failed = _conditions(c, name)["Failed"]
        assert (failed["status"], failed["reason"]) == ("True", "ChildRefused"), failed
        assert status["message"].startswith("refused by the API server: "), status["message"]
        assert "(HTTP 422)" in status["message"]
        assert _conditions(c, name)["SpecValid"]["status"] == "True"
        applied = _conditions(c, name)["ChildrenApplied"]
        assert (applied["status"], applied["reason"][-7:]) == ("False", "Refused")
    # The refused pods were sent once; the job's other children are torn down.
    name = "bad-toleration-operator"
    assert "spec.tolerations[0].operator" in status_of(c, name)["message"]
    wait_until(lambda: not pods_of(c, name), timeout=30, what="the trainer's other pods deleted")
    refused = c.refusals("Pod", f"{name}-trainer-0")
    assert refused == 1
    _poke(c, operator, name, "1")
    _poke(c, operator, name, "2")
    assert c.refusals("Pod", f"{name}-trainer-0") == refused
    assert len(_events(c, name, "FailedCreate")) == 1
    assert status_of(c, name)["phase"] == "Failed"


def test_a_refused_job_starts_over_when_its_spec_changes(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    name = "bad-priority-class"
    c.create(refused_children()[name])
    wait_until(lambda: status_of(c, name).get("phase") == "Failed", timeout=30, what="Failed")
    fixed = {"spec": {"trainer": {"template": {"priorityClassName": "high-priority"}}}}
    c.patch(c.job_path(name), fixed)
    wait_until(lambda: status_of(c, name).get("phase") == "Pending", timeout=30, what="Pending")
    wait_until(lambda: f"{name}-trainer-0" in pods_of(c, name), timeout=30, what="trainer pod")
    assert _conditions(c, name)["Failed"]["reason"] == "SpecCorrected"


def test_a_running_jobs_refused_child_is_on_its_top_line_and_not_retried(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    """The namespace starts enforcing the Restricted Pod Security Standard while the job runs
    with engines relaxed to `baseline`: the replacement of a failed engine is forbidden (403)."""
    c = cluster
    relaxed = {"replicas": 2, "template": {"security": {"profile": "baseline"}}}
    c.create(job_manifest("strict-later", inference=relaxed))
    run_all(c, "strict-later")
    c.label_namespace({ENFORCE_LABEL: "restricted"})
    try:
        set_phase(c, "strict-later-engine-1", "Failed")
        message = wait_until(
            lambda: (
                "API server:" in status_of(c, "strict-later").get("message", "")
                and status_of(c, "strict-later")["message"]
            ),
            timeout=30,
            what="the refusal on the top line",
        )
        assert message.startswith("2/2 trainer pods running; API server: Pod ")
        assert "strict-later-engine-1: create refused (HTTP 403)" in message
        assert 'violates PodSecurity "restricted:latest"' in message
        assert message.endswith("(not retried until the spec changes)")
        assert status_of(c, "strict-later")["phase"] == "Running"
        refused = c.refusals("Pod", "strict-later-engine-1")
        assert refused == 1
        _poke(c, operator, "strict-later", "1")
        _poke(c, operator, "strict-later", "2")
        assert c.refusals("Pod", "strict-later-engine-1") == refused
        assert status_of(c, "strict-later")["phase"] == "Running"
        assert "strict-later-engine-0" in pods_of(c, "strict-later")
    finally:
        c.label_namespace({ENFORCE_LABEL: None})
