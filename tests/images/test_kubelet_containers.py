"""The test kubelet's container mode (`tests/operator/kubelet_processes.Containers`), pod by
pod: a container runs in the runtime image as its pod's `securityContext`, volumes and
environment say; a graceful delete runs the `preStop` hook inside the container before its
SIGTERM; a freeze stops the whole container and an eviction kills it; and no container
outlives the kubelet, or a test process that was killed before it could remove its own."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dressage_testkit.kube import EmulatedCluster, emulated_cluster

from tests.operator.kubelet import Kubelet
from tests.operator.kubelet_processes import (
    KUBELET_LABEL,
    ContainerProcess,
    Containers,
    Podman,
)
from tests.operator.waiting import wait_until

from .support import CONTAINERS_CONF, Images, podman

pytestmark = pytest.mark.integration
NAMESPACE = "kl"
Obj = dict[str, Any]

_REPORT = """
import json, os, pathlib, socket
def writable(path):
    try:
        pathlib.Path(path, "probe").write_text("x")
        return True
    except OSError:
        return False
lines = open("/proc/self/status").read().splitlines()
status = dict(line.split(":\\t", 1) for line in lines if ":\\t" in line)
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
    "cwd": os.getcwd(), "hostname": socket.gethostname(),
    "env": {k: os.environ.get(k) for k in ("TOKEN", "PORT", "PEER")},
    "writable": {p: writable(p) for p in ("/", "/tmp", "/data", "/claim", "/etc/cfg")},
    "config": pathlib.Path("/etc/cfg/key").read_text(),
    "claim_file": pathlib.Path("/claim/staged").read_text(),
    "caps": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
}))
"""
_TERM_RECORDER = """
import os, pathlib, signal, sys, time
out = pathlib.Path("/out")
def term(*_):
    (out / "term").write_text("hook ran first" if (out / "hook").exists() else "no hook yet")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
(out / "started").write_text("")
n = 0
while True:
    n += 1
    (out / "count").write_text(str(n))
    time.sleep(0.05)
"""
_HOOK = """
import os, pathlib
pathlib.Path("/out/hook").write_text(f"{os.getuid()} {os.environ['PEER']}")
"""


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with emulated_cluster(NAMESPACE) as c:
        yield c


@pytest.fixture
def runner(images: Images) -> Containers:
    return Containers(Podman({"CONTAINERS_CONF": str(CONTAINERS_CONF)}), [images.runtime])


@pytest.fixture
def kubelet(cluster: EmulatedCluster, runner: Containers, tmp_path: Path) -> Iterator[Kubelet]:
    node = Kubelet(cluster, tmp_path / "node", runner=runner)
    yield node
    node.stop()
    assert runner.left() == [], "containers left after the kubelet stopped"


def _pod(name: str, container: Obj, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", **container}], **spec},
    }


def _phase(c: EmulatedCluster, name: str) -> str | None:
    phase: str | None = (c.get(c.path("v1", "pods", name)) or {}).get("status", {}).get("phase")
    return phase


def _volume(kubelet: Kubelet, pod: str, volume: str) -> Path:
    return kubelet.pods[pod].mounts[volume]


def test_a_pod_runs_in_its_image_as_its_security_context_volumes_and_env_say(
    cluster: EmulatedCluster, kubelet: Kubelet, images: Images
) -> None:
    c = cluster
    token = base64.b64encode(b"s3cret").decode()
    c.create(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok"}, "data": {"t": token}}
    )
    c.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"key": "v"}}
    )
    staged = kubelet.root / "claims" / "shared" / "staged"
    staged.parent.mkdir(parents=True)
    staged.write_text("from the host")  # root's, 0644: the pod's fsGroup makes it the pod's
    container = {
        "image": images.runtime,
        "command": ["python", "-c", _REPORT],
        "workingDir": "/data",
        "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "t"}}},
            {"name": "PORT", "value": "8080"},
            {"name": "PEER", "value": f"http://kl-report.{NAMESPACE}.svc:80/x"},
        ],
        "ports": [{"name": "http", "containerPort": 8080}],
        "securityContext": {
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "claim", "mountPath": "/claim"},
            {"name": "cfg", "mountPath": "/etc/cfg"},
        ],
    }
    c.create(_service("kl-report"))
    c.create(
        _pod(
            "kl-report",
            container,
            restartPolicy="Never",
            securityContext={
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 3000,
                "fsGroup": 2000,
                "fsGroupChangePolicy": "OnRootMismatch",
                "supplementalGroups": [4000],
            },
            volumes=[
                {"name": "data", "emptyDir": {}},
                {"name": "claim", "persistentVolumeClaim": {"claimName": "shared"}},
                {"name": "cfg", "configMap": {"name": "cfg"}},
            ],
        )
    )
    kubelet.start()
    wait_until(lambda: _phase(c, "kl-report") in ("Succeeded", "Failed"), 120, "the pod to end")
    log = kubelet.log_text("kl-report", "main")
    assert _phase(c, "kl-report") == "Succeeded", log[-3000:]
    report = json.loads(log.strip().splitlines()[-1])
    loopback = kubelet.port("kl-report", 8080)
    assert (report["uid"], report["gid"]) == (1000, 3000), report
    assert {2000, 4000} <= set(report["groups"]), report
    assert report["cwd"] == "/data"
    assert report["hostname"] == "kl-report"
    # Env resolved by the kubelet: the Secret's value, the own port and the Service on loopback.
    assert report["env"] == {
        "TOKEN": "s3cret",
        "PORT": str(loopback),
        "PEER": f"http://127.0.0.1:{loopback}/x",
    }
    # A read-only root has no writable /tmp (as on Kubernetes); the volumes are the pod's.
    assert report["writable"] == {
        "/": False,
        "/tmp": False,
        "/data": True,
        "/claim": True,
        "/etc/cfg": False,
    }
    assert report["config"] == "v"
    assert report["claim_file"] == "from the host"
    assert (int(report["caps"], 16), report["no_new_privs"]) == (0, "1")
    # The files the container made on the claim are the pod's user's, in its fsGroup.
    made = (kubelet.root / "claims" / "shared" / "probe").stat()
    assert (made.st_uid, made.st_gid) == (1000, 2000)


def test_a_graceful_delete_runs_the_prestop_hook_in_the_container_then_sigterm(
    cluster: EmulatedCluster, kubelet: Kubelet, images: Images
) -> None:
    c = cluster
    c.create(_service("kl-hook"))
    c.create(_hooked_pod("kl-hook", images.runtime))
    kubelet.start()
    wait_until(lambda: "kl-hook" in kubelet.pods and kubelet.running("kl-hook"), 60, "the pod")
    out = _volume(kubelet, "kl-hook", "out")
    wait_until(lambda: (out / "started").exists(), 60, "the container to start")
    c.delete(c.path("v1", "pods", "kl-hook"))
    wait_until(lambda: "kl-hook" in kubelet.terminated, 60, "its termination to end")
    assert (out / "term").read_text() == "hook ran first"
    # The hook ran inside the container: its user, its environment (names resolved at start).
    loopback = kubelet.port("kl-hook", 8080)
    assert (out / "hook").read_text() == f"1000 http://127.0.0.1:{loopback}/x"
    (hook,) = kubelet.hooks
    assert (hook.pod, hook.container, hook.exit_code) == ("kl-hook", "main", 0), hook.output
    (pod,) = [p for p in kubelet.finished if p.name == "kl-hook"]
    assert pod.containers["main"].process is not None
    assert pod.containers["main"].process.poll() == 0  # its SIGTERM handler's exit


def test_a_freeze_stops_the_whole_container_and_an_eviction_kills_it(
    cluster: EmulatedCluster, kubelet: Kubelet, runner: Containers, images: Images
) -> None:
    c = cluster
    c.create(_hooked_pod("kl-frozen", images.runtime))
    kubelet.start()
    wait_until(lambda: "kl-frozen" in kubelet.pods and kubelet.running("kl-frozen"), 60, "the pod")
    out = _volume(kubelet, "kl-frozen", "out")
    wait_until(lambda: (out / "count").exists(), 60, "the container to count")
    process = kubelet.pods["kl-frozen"].containers["main"].process
    assert isinstance(process, ContainerProcess)
    kubelet.freeze("kl-frozen")
    frozen_at = (out / "count").read_text()
    time.sleep(1.0)  # a window in which a running container would count 20 more
    assert (out / "count").read_text() == frozen_at
    kubelet.thaw("kl-frozen")
    wait_until(lambda: (out / "count").read_text() != frozen_at, 30, "counting again")
    kubelet.evict("kl-frozen")
    assert process.wait(timeout=30) == 137  # SIGKILL, as Kubernetes reports it
    assert _phase(c, "kl-frozen") == "Failed"
    assert not (out / "term").exists()  # no SIGTERM handler ran
    assert runner.left() == []  # removed as it ended


def test_no_container_outlives_its_kubelet_or_a_killed_test_process(
    cluster: EmulatedCluster, runner: Containers, images: Images, tmp_path: Path
) -> None:
    # A container of a test process that is gone (a pid that exited), as a killed test leaves.
    gone = subprocess.Popen(["true"])
    gone.wait()
    orphan = "k8s-orphan-of-a-killed-test"
    podman(
        "run",
        "--detach",
        "--rm",
        f"--name={orphan}",
        f"--label={KUBELET_LABEL}={gone.pid}.0",
        "--entrypoint=sleep",
        images.runtime,
        "300",
    )
    live = f"k8s-of-a-live-kubelet-{os.getpid()}"
    podman(
        "run",
        "--detach",
        "--rm",
        f"--name={live}",
        f"--label={KUBELET_LABEL}={os.getpid()}.999",
        "--entrypoint=sleep",
        images.runtime,
        "300",
    )
    try:
        Containers(runner.podman, [images.runtime])
        names = podman("ps", "--all", "--format={{.Names}}").stdout.split()
        assert orphan not in names
        assert live in names  # its test process still runs
    finally:
        podman("rm", "--force", "--ignore", "--time=0", orphan, live)
    c = cluster
    c.create(_hooked_pod("kl-left", images.runtime))
    node = Kubelet(c, tmp_path / "node", runner=runner).start()
    try:
        wait_until(lambda: len(runner.left()) == 1, 60, "the pod's container")
    finally:
        node.stop()
    assert runner.left() == []


def _service(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": "http"}]},
    }


def _hooked_pod(name: str, image: str) -> Obj:
    """A pod whose container counts in /out and records on SIGTERM whether its `preStop` hook
    (which writes its uid and `PEER`, a Service name resolved at the start) ran before."""
    return _pod(
        name,
        {
            "image": image,
            "command": ["python", "-c", _TERM_RECORDER],
            "env": [{"name": "PEER", "value": f"http://{name}.{NAMESPACE}.svc:80/x"}],
            "ports": [{"name": "http", "containerPort": 8080}],
            "lifecycle": {"preStop": {"exec": {"command": ["python", "-c", _HOOK]}}},
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
            "volumeMounts": [{"name": "out", "mountPath": "/out"}],
        },
        restartPolicy="Never",
        terminationGracePeriodSeconds=30,
        securityContext={"runAsUser": 1000, "fsGroup": 1000},
        volumes=[{"name": "out", "emptyDir": {}}],
    )
