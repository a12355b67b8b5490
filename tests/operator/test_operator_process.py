"""`python -m dressage_operator` as a real process against an API emulation that refuses
invalid children (`dressage_testkit.kube`): a child the API server would refuse is named
on the job at once and nothing is created, the job starts when its spec is fixed; a child the
API server refuses shows at once as a condition, a Warning Event and the phase."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dressage_testkit.kube import ENFORCE_LABEL, EmulatedCluster
from dressage_testkit.processes import free_port, stop_process

from .waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_IMAGE = "registry.test/dressage-runtime:from-the-cli"


class OperatorProcess:
    def __init__(self, cluster: EmulatedCluster, tmp: Path) -> None:
        self.log_path = tmp / "operator.log"
        self.health = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.write_kubeconfig(tmp / "config")),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'operator'}",
        }
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dressage_operator",
                "--namespace",
                cluster.namespace,
                "--metrics-port",
                "0",
                "--health-port",
                str(self.health),
                "--resync-seconds",
                "60",
                "--runtime-image",
                RUNTIME_IMAGE,
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def listening(self) -> bool:
        assert self.process.poll() is None, self.output()
        try:
            with socket.create_connection(("127.0.0.1", self.health), timeout=1):
                return True
        except OSError:
            return False

    def output(self) -> str:
        return self.log_path.read_text()[-4000:]

    def stop(self) -> None:
        stop_process(self.process, grace_s=30)
        self.log.close()


@pytest.fixture(scope="module")
def operator_process(
    cluster: EmulatedCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(cluster, tmp_path_factory.mktemp("operator"))
    try:
        wait_until(op.listening, timeout=60, what="the operator's liveness port")
        yield op
    finally:
        op.stop()


def _status(c: EmulatedCluster, job: str) -> dict[str, Any]:
    status: dict[str, Any] = (c.get(c.job_path(job)) or {}).get("status") or {}
    return status


def _condition(c: EmulatedCluster, job: str, ctype: str) -> dict[str, Any] | None:
    return next((x for x in _status(c, job).get("conditions", []) if x["type"] == ctype), None)


def _events(c: EmulatedCluster, job: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in c.items("v1", "events")
        if e.get("involvedObject", {}).get("name") == job and e.get("reason") == reason
    ]


def _job(name: str, **trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": name},
        "spec": {
            "model": {"source": "builtin:tiny"},
            "storage": {"persistentVolumeClaim": "shared"},
            "trainer": {"nodes": 1, "gpusPerNode": 0, **trainer},
            "inference": {"replicas": 1},
        },
    }


def test_a_child_the_api_server_would_refuse_is_named_at_once_and_nothing_is_created(
    cluster: EmulatedCluster, operator_process: OperatorProcess
) -> None:
    c = cluster
    # The job model passes template volumes through; the API server would refuse the
    # duplicate of the operator's own `dshm` volume in the trainer pod.
    c.create(_job("refused", template={"volumes": [{"name": "dshm", "emptyDir": {}}]}))
    # "At once": on the first cycle, not after a retry (kopf's backoff for a failed handler
    # is 60 s), hence a deadline below that rather than a timing assertion.
    condition = wait_until(
        lambda: (
            (cond := _condition(c, "refused", "SpecValid")) is not None
            and cond["status"] == "False"
            and cond
        ),
        timeout=45,
        what=f"SpecValid=False; operator log:\n{operator_process.output()}",
    )
    assert condition["reason"] == "InvalidSpec"
    assert condition["message"] == (
        'spec.trainer.template.volumes[0].name: Duplicate value: "dshm" (the API server would '
        "refuse Pod refused-trainer-0)"
    )
    assert _status(c, "refused")["phase"] == "Failed"
    assert c.get(c.path("v1", "pods", "refused-engine-0")) is None
    assert c.get(c.path("apps/v1", "deployments", "refused-proxy")) is None
    assert c.get(c.path("v1", "configmaps", "refused-config")) is None

    # Fixed: the job starts; the proxy runs the image the CLI set.
    c.patch(c.job_path("refused"), {"spec": {"trainer": {"template": {"volumes": []}}}})
    wait_until(
        lambda: c.get(c.path("v1", "pods", "refused-trainer-0")), timeout=60, what="trainer pod"
    )
    proxy = wait_until(
        lambda: c.get(c.path("apps/v1", "deployments", "refused-proxy")), timeout=60, what="proxy"
    )
    assert proxy["spec"]["template"]["spec"]["containers"][0]["image"] == RUNTIME_IMAGE
    # The status is written after the children, so it is waited for, not read at once.
    wait_until(
        lambda: (_condition(c, "refused", "SpecValid") or {}).get("status") == "True",
        timeout=60,
        what="SpecValid=True",
    )


def test_a_child_the_api_server_refuses_shows_as_a_condition_an_event_and_the_phase(
    cluster: EmulatedCluster, operator_process: OperatorProcess
) -> None:
    """A Pod Security level only the API server knows of: 403, a permanent refusal."""
    c = cluster
    c.label_namespace({ENFORCE_LABEL: "restricted"})
    try:
        c.create(_job("forbidden", template={"security": {"profile": "baseline"}}))
        condition = wait_until(
            lambda: (
                (cond := _condition(c, "forbidden", "ChildrenApplied")) is not None
                and cond["status"] == "False"
                and cond
            ),
            timeout=10,
            what=f"ChildrenApplied=False; operator log:\n{operator_process.output()}",
        )
    finally:
        c.label_namespace({ENFORCE_LABEL: None})
    assert condition["reason"] == "PodRefused"
    assert "Pod forbidden-trainer-0: create refused (HTTP 403)" in condition["message"]
    assert 'violates PodSecurity "restricted:latest"' in condition["message"]
    (event,) = wait_until(lambda: _events(c, "forbidden", "FailedCreate"), timeout=10, what="Event")
    assert event["type"] == "Warning"
    assert "forbidden-trainer-0" in event["message"]
    status = wait_until(
        lambda: _status(c, "forbidden").get("phase") == "Failed" and _status(c, "forbidden"),
        timeout=10,
        what="Failed",
    )
    assert status["message"].startswith(
        "refused by the API server: Pod forbidden-trainer-0: create refused (HTTP 403)"
    )
    assert _condition(c, "forbidden", "Failed")["reason"] == "ChildRefused"  # type: ignore[index]
