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
