"""The first failure named at the top line: what keeps a job's pods from starting or running
shows in `kubectl get arj` (the job's phase and message) within a reconcile of the pod's
status, in condition `PodsHealthy` naming the pod and as one Warning Event per problem, and
clears once the pod recovers.

One job, the real operator, and the test kubelet's node (`kubelet_failures`) producing each
status from its cause, one cause after another, the trainer held back until the end: the
claim the job names missing (Unschedulable), the node without the memory the trainer asks
or the GPU an engine asks (Unschedulable), the engine's image not pullable (ErrImagePull,
ImagePullBackOff), the proxy token's Secret missing and then its key
(CreateContainerConfigError), the engine's model missing so it keeps exiting
(CrashLoopBackOff), then the OOM killer (OOMKilled). Nothing trains: the trainer is placed
only at the end, to clear the last problem."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dressage_testkit.kube import EmulatedCluster

from dressage.model import build_tiny_model

from .conftest import Operator
from .jobs import delete_jobs, job_manifest, pods_of, status_of
from .kubelet import Kubelet
from .waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
JOB = "ff"
TRAINER, ENGINE = f"{JOB}-trainer-0", f"{JOB}-engine-0"
MARK = "; stuck: "


@pytest.fixture
def node(cluster: EmulatedCluster, operator: Operator, tmp_path: Path) -> Iterator[Kubelet]:
    """The test kubelet with the kubelet's back-offs shortened, beside the module's operator."""
    kubelet = Kubelet(cluster, tmp_path / "node")
    kubelet.node.backoff_s = 0.5
    kubelet.node.max_backoff_s = 2.0
    kubelet.node.sync_s = 0.1
    kubelet.start()
    yield kubelet
    delete_jobs(cluster)
    kubelet.stop()


def _top(c: EmulatedCluster) -> str:
    """The job's top line: `<phase>: <message>`, as `kubectl get arj` prints them."""
    status = status_of(c, JOB)
    return f"{status.get('phase')}: {status.get('message', '')}"


def _healthy(c: EmulatedCluster) -> dict[str, Any]:
    conditions = {x["type"]: x for x in status_of(c, JOB).get("conditions") or []}
    return conditions.get("PodsHealthy", {})


def _events(c: EmulatedCluster, reason: str) -> list[str]:
    return [
        str(e.get("message"))
        for e in c.items("v1", "events")
        if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == JOB
    ]


def _named(
    c: EmulatedCluster, pod: str, reason: str, says: str = "", phase: str = "Pending"
) -> str:
    """Wait until the top line names `pod` with `reason` (and `says` in what it says of it),
    and the condition too; return what the top line says of it."""

    def said() -> str | None:
        found = re.search(rf"{pod} {reason}: (.*?)(?=; {JOB}-\S+ [A-Za-z]+: |$)", _top(c))
        condition = _healthy(c)
        named = condition.get("status") == "False" and f"{pod} {reason}: " in condition["message"]
        ok = found and says in found[1] and named and _top(c).startswith(f"{phase}: ")
        return found[1] if ok else None

    text: str = wait_until(said, 30, f"{pod} {reason} on the top line; it says {_top(c)!r}")
    return text


def _cleared(c: EmulatedCluster, pod: str) -> None:
    wait_until(lambda: f"{pod} " not in _healthy(c).get("message", ""), 60, f"{pod} recovered")


def test_each_first_failure_is_named_at_the_top_line_and_clears_when_the_pod_recovers(
    cluster: EmulatedCluster, node: Kubelet
) -> None:
    c = cluster
    node.node.claims_from_api = True
    node.node.allocatable = {"nvidia.com/gpu": "0", "memory": "8Gi"}
    manifest = job_manifest(
        JOB,
        model={"source": "/dressage/models/tiny"},
        trainer={"nodes": 1, "gpusPerNode": 0, "resources": {"requests": {"memory": "64Gi"}}},
        inference={"replicas": 1},
        proxy={"tokenSecret": {"name": "ff-token", "key": "token"}},
        training={"steps": 1},
    )
    c.create(manifest)

    # The claim the job names does not exist: the scheduler places neither pod.
    claim = 'persistentvolumeclaim "shared" not found'
    assert _named(c, TRAINER, "Unschedulable").startswith(f"0/1 nodes are available: {claim}.")
    _named(c, ENGINE, "Unschedulable")
    assert _top(c).startswith("Pending: 0/1 trainer pods ready" + MARK)
    assert _top(c).index(TRAINER) < _top(c).index(ENGINE)  # the trainer first
    assert _healthy(c)["reason"] == "Unschedulable"
    wait_until(lambda: len(_events(c, "Unschedulable")) == 2, what="a Warning Event per pod")
    assert sorted(_events(c, "Unschedulable"))[0].startswith(f"pod {ENGINE} Unschedulable: ")

    # The claim bound: the trainer asks more memory than the node has (until the end), the
    # engine a GPU.
    engine = pods_of(c, JOB)[ENGINE]["spec"]["containers"][0]
    image = engine["image"]
    node.node.unpullable = {image}
    volume = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "shared"}}
    c.create({**volume, "status": {"phase": "Bound"}})
    memory = _named(c, TRAINER, "Unschedulable", "Insufficient memory")
    assert memory.startswith("0/1 nodes are available: 1 Insufficient memory. preemption: ")
    gpus = _named(c, ENGINE, "Unschedulable", "Insufficient")
    assert gpus.startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")

    # GPUs enough: the engine's image cannot be pulled.
    node.node.allocatable = {"nvidia.com/gpu": "1", "memory": "8Gi"}
    pulling = wait_until(
        lambda: re.search(rf"{ENGINE} (ErrImagePull|ImagePullBackOff): (.*)", _top(c)),
        30,
        "the engine's image named",
    )
    assert pulling[2].startswith(f'container {engine["name"]} image "{image}": ')
    _named(c, ENGINE, "ImagePullBackOff")
    assert len(_events(c, "ErrImagePull") + _events(c, "ImagePullBackOff")) == 1
    assert len(_events(c, "Unschedulable")) == 2  # the claim and the resources: one problem

    # Pulled: the proxy token's Secret does not exist, then lacks its key.
    node.node.unpullable = set()
    secret = _named(c, ENGINE, "CreateContainerConfigError")
    assert secret == f'container {engine["name"]}: secret "ff-token" not found'
    token = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ff-token"}}
    c.create({**token, "data": {"other": base64.b64encode(b"x").decode()}})
    key = _named(c, ENGINE, "CreateContainerConfigError", "couldn't find key")
    assert key.endswith(f": couldn't find key token in Secret {c.namespace}/ff-token")
    assert len(_events(c, "CreateContainerConfigError")) == 1  # one problem, one Event

    # Its key written, the engine starts, finds no model and exits, again and again.
    c.patch(c.path("v1", "secrets", "ff-token"), {"data": {"token": "eA=="}})
    crash = _named(c, ENGINE, "CrashLoopBackOff")
    assert re.match(rf"container {engine['name']} exited with code [1-9]\d* \(Error\)", crash)
    assert "back-off" in _healthy(c)["message"]
    wait_until(lambda: _events(c, "CrashLoopBackOff"), what="the crash loop's Event")

    # The model written, the engine starts and is ready: its problem clears.
    build_tiny_model(node.root / "claims" / "shared" / "models" / "tiny")
    _cleared(c, ENGINE)
    recovered = f"pod {ENGINE} recovered from CrashLoopBackOff"
    wait_until(lambda: recovered in _events(c, "PodRecovered"), what="the recovery's Event")

    # The OOM killer ends the engine at every start: OOMKilled, until it no longer does.
    node.node.oom_kill(ENGINE, engine["name"], every_start=True)
    oom = _named(c, ENGINE, "OOMKilled")
    assert oom.startswith(f"container {engine['name']} exited with code 137 (OOMKilled)")
    wait_until(lambda: _events(c, "OOMKilled"), what="the OOM kill's Event")
    node.node.memory_short.clear()
    _cleared(c, ENGINE)

    # Memory enough, the trainer is placed and starts: nothing is stuck any more.
    node.node.allocatable = None
    wait_until(lambda: _healthy(c).get("status") == "True", 60, "every pod recovered")
    assert MARK not in _top(c)
    assert _healthy(c)["reason"] == "NoPodProblems"
    assert not _events(c, "Failed")  # no problem failed the job
