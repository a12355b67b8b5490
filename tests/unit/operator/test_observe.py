"""What the operator reads from a pod's body."""

from __future__ import annotations

from dressage_operator.observe import pod_info


def test_pod_info_reads_phase_readiness_and_failure_reason() -> None:
    body = {
        "metadata": {
            "name": "job-a-trainer-1",
            "uid": "x",
            "labels": {
                "dressage.io/job": "job-a",
                "dressage.io/role": "trainer",
                "dressage.io/index": "1",
                "dressage.io/gang": "2",
            },
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }
            ],
        },
    }
    info = pod_info(body)
    assert info is not None
    assert (info.index, info.gang, info.failed) == (1, 2, True)
    assert info.reason == "trainer: OOMKilled (exit code 137)"
    assert pod_info({"metadata": {"labels": {}}}) is None


def test_who_terminates_a_pod_is_read_from_its_disruption_conditions() -> None:
    """Kubernetes' `DisruptionTarget` (preemption by the scheduler, an eviction) and Kueue's
    `TerminationTarget` (Kueue stopping the pod's Workload) say why a pod goes."""
    labels = {"dressage.io/job": "job-a", "dressage.io/role": "trainer"}

    def info(*conditions: dict[str, str]) -> str:
        body = {
            "metadata": {"name": "job-a-trainer-0", "labels": labels},
            "status": {"phase": "Running", "conditions": list(conditions)},
        }
        found = pod_info(body)
        assert found is not None
        return found.disruption

    assert info({"type": "Ready", "status": "True"}) == ""
    kueue = {"type": "TerminationTarget", "status": "True", "reason": "Preempted"}
    assert info(kueue) == "TerminationTarget: Preempted"
    evicted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    assert info(evicted) == "DisruptionTarget: EvictionByEvictionAPI"
    assert info({**evicted, "status": "False"}) == ""
