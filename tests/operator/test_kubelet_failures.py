"""The test kubelet's node writes what keeps a pod from starting or running as the scheduler and
the kubelet write it (`kubelet_failures`, `kubelet_scheduling`), from causes a test sets up:
the node's allocatable resources, a claim or Secret the API lacks, an image the node cannot
pull, a container that keeps failing, the OOM killer; and each pod starts once its cause is
gone. Hand-written pods, no operator: `test_first_failures.py` plays the operator's."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from dressage_testkit.kube import EmulatedCluster

from .kubelet import Kubelet
from .kubelet_failures import go_duration
from .kubelet_scheduling import NO_VICTIMS, fit_error, pod_requests
from .waiting import wait_until

pytestmark = pytest.mark.integration
SLEEP = ["python", "-c", "import time; time.sleep(300)"]


@pytest.fixture
def node(cluster: EmulatedCluster, tmp_path: Path) -> Iterator[Kubelet]:
    kubelet = Kubelet(cluster, tmp_path / "node")
    kubelet.node.backoff_s = 0.5
    kubelet.node.max_backoff_s = 2.0
    kubelet.node.sync_s = 0.1
    kubelet.start()
    yield kubelet
    kubelet.stop()
    for pod in cluster.items("v1", "pods"):
        cluster.delete(cluster.path("v1", "pods", pod["metadata"]["name"]))


def _pod(name: str, restart: str = "Never", **container: Any) -> dict[str, Any]:
    main = {"name": "main", "image": "python:3.11", "command": SLEEP, **container}
    spec = {"restartPolicy": restart, "containers": [main]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _status(c: EmulatedCluster, name: str) -> dict[str, Any]:
    status: dict[str, Any] = (c.get(c.path("v1", "pods", name)) or {}).get("status") or {}
    return status


def _scheduled(c: EmulatedCluster, name: str) -> dict[str, Any]:
    conditions = _status(c, name).get("conditions") or []
    return next((x for x in conditions if x["type"] == "PodScheduled"), {})


def _main(c: EmulatedCluster, name: str) -> dict[str, Any]:
    return _first_container(_status(c, name))


def _first_container(status: dict[str, Any]) -> dict[str, Any]:
    return next(iter(status.get("containerStatuses") or [{}]))


def _waiting_in(status: dict[str, Any]) -> tuple[str, str]:
    """The first container's waiting (reason, message) in a pod status; empty when none."""
    waiting = (_first_container(status).get("state") or {}).get("waiting") or {}
    return waiting.get("reason", ""), waiting.get("message", "")


def _waiting(c: EmulatedCluster, name: str) -> tuple[str, str]:
    return _waiting_in(_status(c, name))


def _waited(c: EmulatedCluster, name: str) -> list[tuple[str, str]]:
    """The first container's waiting states as the pod's stored versions went through them
    (each state once per stretch, in order)."""
    states: list[tuple[str, str]] = []
    for version in c.history("v1", "pods", name):
        state = _waiting_in(version.get("status") or {})
        if state[0] and (not states or states[-1] != state):
            states.append(state)
    return states


def test_a_pod_asking_more_than_the_node_has_or_a_missing_claim_is_unschedulable(
    cluster: EmulatedCluster, node: Kubelet
) -> None:
    """The scheduler's FitError (pkg/scheduler/framework/types.go, v1.33), until it fits."""
    c = cluster
    node.node.allocatable = {"nvidia.com/gpu": "0"}
    node.node.claims_from_api = True
    gpu = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    pod = _pod("kf-gpu", resources=gpu)
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "kf"}}]
    c.create(pod)
    missing = wait_until(lambda: _scheduled(c, "kf-gpu").get("message"), what="Unschedulable")
    assert _scheduled(c, "kf-gpu")["reason"] == "Unschedulable"
    assert missing == (
        '0/1 nodes are available: persistentvolumeclaim "kf" not found. preemption: 0/1 nodes '
        "are available: 1 No preemption victims found for incoming pod."
    )
    assert "containerStatuses" not in _status(c, "kf-gpu")
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "kf"}}
    c.create({**claim, "status": {"phase": "Pending"}})
    unbound = "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    wait_until(lambda: _scheduled(c, "kf-gpu")["message"].startswith(unbound), what="unbound")
    c.patch(c.path("v1", "persistentvolumeclaims", "kf"), {"status": {"phase": "Bound"}})
    wait_until(lambda: "Insufficient" in _scheduled(c, "kf-gpu")["message"], what="the GPUs")
    assert _scheduled(c, "kf-gpu")["message"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
        "available: 1 No preemption victims found for incoming pod."
    )
    node.node.allocatable = {"nvidia.com/gpu": "1"}
    placed = {"type": "PodScheduled", "status": "True"}
    wait_until(lambda: _scheduled(c, "kf-gpu") == placed, 30, "the pod placed")
    wait_until(lambda: _main(c, "kf-gpu")["state"] == {"running": {}}, 30, "it runs")


def test_an_image_the_node_cannot_pull_and_a_missing_secret_keep_the_container_waiting(
    cluster: EmulatedCluster, node: Kubelet
) -> None:
    """ErrImagePull then ImagePullBackOff (pkg/kubelet/images/image_manager.go), then
    CreateContainerConfigError with the kubelet's message (kubelet_pods.go)."""
    c = cluster
    node.node.unpullable = {"ghcr.io/acme/runtime:0.1"}
    env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "kf-token", "key": "token"}}}]
    c.create(_pod("kf-pull", image="ghcr.io/acme/runtime:0.1", env=env))
    pull = (
        "ErrImagePull",
        'rpc error: code = NotFound desc = failed to pull and unpack image "ghcr.io/acme/'
        'runtime:0.1": failed to resolve reference "ghcr.io/acme/runtime:0.1": '
        "ghcr.io/acme/runtime:0.1: not found",
    )
    backoff = ("ImagePullBackOff", 'Back-off pulling image "ghcr.io/acme/runtime:0.1"')
    # ErrImagePull lasts one sync (0.1 s here) before each back-off: read from the pod's
    # stored versions, not by polling its status.
    seen = wait_until(
        lambda: (states := _waited(c, "kf-pull"))[:2] == [pull, backoff] and states,
        what="ErrImagePull, then ImagePullBackOff",
    )
    assert set(seen) == {pull, backoff}, seen  # the retries alternate, nothing else between
    assert _main(c, "kf-pull")["image"] == "ghcr.io/acme/runtime:0.1"
    assert _status(c, "kf-pull")["phase"] == "Pending"

    node.node.unpullable = set()
    config = "CreateContainerConfigError"
    missing = (config, 'secret "kf-token" not found')
    wait_until(lambda: _waiting(c, "kf-pull") == missing, what="the missing Secret")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kf-token"}}
    c.create({**secret, "data": {"other": base64.b64encode(b"x").decode()}})
    no_key = (config, f"couldn't find key token in Secret {c.namespace}/kf-token")
    wait_until(lambda: _waiting(c, "kf-pull") == no_key, what="the missing key")
    c.patch(c.path("v1", "secrets", "kf-token"), {"data": {"token": "eA=="}})
    wait_until(lambda: _main(c, "kf-pull")["state"] == {"running": {}}, 30, "it runs")


def test_a_failing_container_of_an_always_pod_backs_off_in_a_crash_loop(
    cluster: EmulatedCluster, node: Kubelet
) -> None:
    """The first restart at once, the next after a back-off in CrashLoopBackOff
    (kuberuntime_manager.go doBackOff), the last run's end in `lastState.terminated`, its
    message the log's tail with `FallbackToLogsOnError` (kuberuntime_container.go)."""
    c = cluster
    command = ["python", "-c", "import sys; print('no model at /models/x'); sys.exit(3)"]
    policy = "FallbackToLogsOnError"
    c.create(_pod("kf-crash", "Always", command=command, terminationMessagePolicy=policy))
    wait_until(lambda: _waiting(c, "kf-crash")[0] == "CrashLoopBackOff", 30, "CrashLoopBackOff")
    status = _main(c, "kf-crash")
    uid = c.get(c.path("v1", "pods", "kf-crash"))["metadata"]["uid"]  # type: ignore[index]
    assert status["state"]["waiting"]["message"] == (
        f"back-off 500ms restarting failed container=main pod=kf-crash_{c.namespace}({uid})"
    )
    assert status["lastState"]["terminated"] == {
        "exitCode": 3,
        "reason": "Error",
        "message": "no model at /models/x",
    }
    assert status["restartCount"] >= 1
    assert _status(c, "kf-crash")["phase"] == "Running"


def test_the_oom_killer_ends_a_container_with_137_oomkilled(
    cluster: EmulatedCluster, node: Kubelet
) -> None:
    """A `Never` pod fails with its container's termination; an `Always` pod restarts it,
    the OOM kill in `lastState`."""
    c = cluster
    c.create(_pod("kf-oom"))
    c.create(_pod("kf-oom-always", "Always"))
    wait_until(lambda: node.running("kf-oom") and node.running("kf-oom-always"), 30, "running")
    node.node.oom_kill("kf-oom", "main")
    node.node.oom_kill("kf-oom-always", "main")
    wait_until(lambda: _status(c, "kf-oom")["phase"] == "Failed", what="the pod failed")
    oom = {"exitCode": 137, "reason": "OOMKilled"}
    assert _main(c, "kf-oom")["state"] == {"terminated": oom}
    wait_until(lambda: _main(c, "kf-oom-always").get("lastState"), what="the restart")
    assert _main(c, "kf-oom-always")["lastState"] == {"terminated": oom}
    assert _main(c, "kf-oom-always")["restartCount"] == 1


def test_the_schedulers_message_counts_each_reason_and_a_pod_requests_its_largest_init() -> None:
    """FitError.Error()'s shape: the Filter reasons per node, sorted and comma-joined; a pod's
    request is its containers' sum or its largest init container's (resource.PodRequests)."""
    assert fit_error("", ["Insufficient nvidia.com/gpu", "Insufficient cpu"], NO_VICTIMS) == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu. "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": "2"}}},
                {"resources": {"requests": {"cpu": "1"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "4", "memory": "1Gi"}}}],
        }
    }
    assert pod_requests(pod) == {
        "cpu": Decimal(4),
        "nvidia.com/gpu": Decimal(2),
        "memory": Decimal(1024**3),
    }
    assert go_duration(0.5) == "500ms"
    assert (go_duration(10), go_duration(300)) == ("10s", "5m0s")
