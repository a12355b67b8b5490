"""`python -m dressage_operator` as a real process against an API emulation that refuses
invalid children (`dressage_operator.testing`): a refused child shows on the job at once, as a
condition and a Warning Event, and the job recovers when its spec is fixed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dressage_operator.testing import EmulatedCluster

from dressage.testing import free_port, stop_process

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


def test_a_refused_child_shows_as_a_condition_and_an_event_at_once(
    cluster: EmulatedCluster, operator_process: OperatorProcess
) -> None:
    c = cluster
    # The job model passes template volumes through; the API server refuses the duplicate of
    # the operator's own `dshm` volume in the trainer pod.
    bad_volumes = [{"name": "dshm", "emptyDir": {}}]
    c.create(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "refused"},
            "spec": {
                "model": {"source": "builtin:tiny"},
                "storage": {"persistentVolumeClaim": "shared"},
                "trainer": {"nodes": 1, "gpusPerNode": 0, "template": {"volumes": bad_volumes}},
                "inference": {"replicas": 1},
            },
        }
    )
    created = time.monotonic()
    condition = wait_until(
        lambda: (
            (cond := _condition(c, "refused", "ChildrenApplied")) is not None
            and cond["status"] == "False"
            and cond
        ),
        timeout=10,
        what=f"ChildrenApplied=False; operator log:\n{operator_process.output()}",
    )
    assert condition["reason"] == "PodRefused"
    message = condition["message"]
    assert "Pod refused-trainer-0: create refused (HTTP 422)" in message
    assert 'spec.volumes[3].name: Duplicate value: "dshm"' in message
    (event,) = wait_until(lambda: _events(c, "refused", "FailedCreate"), timeout=10, what="Event")
    assert event["type"] == "Warning"
    assert "refused-trainer-0" in event["message"]
    assert "spec.volumes[3].name" in event["message"]
    assert time.monotonic() - created < 10
    # The rest of the job was applied: the engine, the proxy (with the image the CLI set).
    assert c.get(c.path("v1", "pods", "refused-engine-0")) is not None
    proxy = c.get(c.path("apps/v1", "deployments", "refused-proxy"))
    assert proxy is not None
    assert proxy["spec"]["template"]["spec"]["containers"][0]["image"] == RUNTIME_IMAGE
    assert c.get(c.path("v1", "pods", "refused-trainer-0")) is None
    assert _status(c, "refused")["phase"] == "Pending"

    # Fixed: the trainer pod is created and the condition clears; the refusal was posted once.
    c.patch(c.job_path("refused"), {"spec": {"trainer": {"template": {"volumes": []}}}})
    wait_until(
        lambda: c.get(c.path("v1", "pods", "refused-trainer-0")), timeout=10, what="trainer pod"
    )
    cleared = wait_until(
        lambda: (
            (cond := _condition(c, "refused", "ChildrenApplied")) is not None
            and cond["status"] == "True"
            and cond
        ),
        timeout=10,
        what="ChildrenApplied=True",
    )
    assert cleared["reason"] == "Applied"
    assert len(_events(c, "refused", "FailedCreate")) == 1
