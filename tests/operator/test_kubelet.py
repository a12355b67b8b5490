"""The test kubelet: SGLang's command as the embedded engine's, Kubernetes' `$(VAR)`
expansion, and a ConfigMap change reaching a running pod's files (what `test_cluster_run.py`
relies on to run the operator's pods)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dressage_operator import children
from dressage_operator.config import OperatorConfig
from dressage_testkit.kube import EmulatedCluster

from dressage.api import validate_job
from dressage.engine.embedded import cli as engine_cli

from .kubelet import Kubelet
from .kubelet_engine import sglang_as_embedded
from .kubelet_wiring import expand
from .waiting import wait_until


def _engine_command(**inference: object) -> list[str]:
    job = validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "k"},
            "spec": {
                "model": {"source": "acme/tiny"},
                "inference": inference,
                "storage": {"persistentVolumeClaim": "shared"},
            },
        }
    )
    pod = children.build_engine_pod(job, children.Owner("k", "ns", "u"), OperatorConfig(), 0)
    command: list[str] = pod["spec"]["containers"][0]["command"]
    return command


def test_the_operators_sglang_command_becomes_an_embedded_engine_command() -> None:
    import argparse

    command = _engine_command(extraArgs=["--max-queued-requests", "4"])
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    argv = sglang_as_embedded(command[3:])
    assert argv[:4] == ["-m", "dressage", "engine", "serve"]
    parser = argparse.ArgumentParser()
    engine_cli.add_arguments(parser)
    args = parser.parse_args(argv[3:])
    assert args.model == "/dressage/models/acme--tiny"
    assert args.port == 30000
    assert args.max_queued_requests == 4
    assert args.weight_version == children.INITIAL_WEIGHT_VERSION


def test_a_flag_without_a_mapping_is_refused() -> None:
    with pytest.raises(AssertionError, match="--chunked-prefill-size"):
        sglang_as_embedded(["--model-path", "m", "--chunked-prefill-size", "512"])
    with pytest.raises(AssertionError, match="--tp-size must be 1"):
        sglang_as_embedded(["--model-path", "m", "--tp-size", "2"])


def test_variable_references_expand_as_kubernetes_does() -> None:
    env = {"A": "1", "B": "two"}
    assert expand("--x=$(A) $(B)/$(C) $$(A)", env) == "--x=1 two/$(C) $(A)"


def _config_map(data: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kl-files"}, "data": data}


@pytest.mark.integration
def test_a_config_map_change_reaches_the_files_of_a_running_pod(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    c = cluster
    ns = c.namespace
    c.create(_config_map({"engines": f"http://kl-a.{ns}.svc:80\n", "stale": "x"}))
    c.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kl-a"},
            "spec": {"selector": {"app": "kl-a"}, "ports": [{"port": 80, "targetPort": "http"}]},
        }
    )
    c.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kl-a", "labels": {"app": "kl-a"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "python",
                        "command": ["python", "-c", "import time; time.sleep(300)"],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "volumeMounts": [{"name": "files", "mountPath": "/etc/kl"}],
                    }
                ],
                "volumes": [{"name": "files", "configMap": {"name": "kl-files"}}],
            },
        }
    )
    node = Kubelet(c, tmp_path / "node").start()
    try:
        wait_until(lambda: node.running("kl-a"), 60, "the pod to run")
        (pod_root,) = (tmp_path / "node" / "pods").glob("kl-a-*")
        files = pod_root / "volumes" / "files"
        a = f"http://127.0.0.1:{node.port('kl-a', 8080)}"
        assert (files / "engines").read_text() == a + "\n"
        process = node.pods["kl-a"].containers["main"].process

        c.delete(c.path("v1", "configmaps", "kl-files"))
        c.create(_config_map({"engines": f"http://kl-a.{ns}.svc:80\nhttp://kl-b.{ns}.svc:80\n"}))
        wait_until(lambda: "kl-b" in (files / "engines").read_text(), 30, "the new engines")
        # Names resolve as at the pod's start (kl-b has no pod: it stays a name).
        assert (files / "engines").read_text() == f"{a}\nhttp://kl-b.{ns}.svc:80\n"
        assert sorted(p.name for p in files.iterdir()) == ["engines"]
        assert node.pods["kl-a"].containers["main"].process is process  # it kept running
        assert node.running("kl-a")
    finally:
        node.stop()


_TERM_RECORDER = """
import os, pathlib, signal, sys, time
out = pathlib.Path(os.environ["OUT"])
def term(*_):
    # What SIGTERM found: whether the preStop hook had already run.
    (out / "term").write_text("hook ran first" if (out / "hook").exists() else "no hook yet")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
(out / "started").write_text("")
while True:
    time.sleep(0.05)
"""
_HOOK = """
import os, pathlib
pathlib.Path(os.environ["OUT"], "hook").write_text(os.environ["PEER"])
"""


def _hooked_pod(name: str, out: Path) -> dict[str, object]:
    """A pod whose container records, on SIGTERM, whether its `preStop` hook ran before; the
    hook writes the value of `PEER`, a Service name resolved as at the container's start."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "main",
                    "image": "python",
                    "command": ["python", "-c", _TERM_RECORDER],
                    "env": [
                        {"name": "OUT", "value": str(out)},
                        {"name": "PEER", "value": f"http://{name}.e2e.svc:80/x"},
                    ],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "lifecycle": {"preStop": {"exec": {"command": ["python", "-c", _HOOK]}}},
                }
            ],
        },
    }


def _service(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": "http"}]},
    }


@pytest.mark.integration
def test_a_graceful_delete_runs_the_prestop_hook_before_sigterm(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    c = cluster
    out = tmp_path / "out"
    out.mkdir()
    c.create(_service("kl-hook"))
    c.create(_hooked_pod("kl-hook", out))
    node = Kubelet(c, tmp_path / "node").start()
    try:
        wait_until(lambda: (out / "started").exists(), 60, "the container to start")
        loopback = f"http://127.0.0.1:{node.port('kl-hook', 8080)}/x"
        c.delete(c.path("v1", "pods", "kl-hook"))
        wait_until(lambda: "kl-hook" in node.terminated, 60, "its termination to end")
        assert (out / "term").read_text() == "hook ran first"
        # The hook ran with the container's environment, names resolved as at its start
        # (the pod has left the API by then).
        assert (out / "hook").read_text() == loopback
        (hook,) = node.hooks
        assert (hook.pod, hook.container, hook.kind, hook.exit_code) == (
            "kl-hook",
            "main",
            "preStop",
            0,
        )
    finally:
        node.stop()


@pytest.mark.integration
def test_an_evicted_pod_runs_no_hook(cluster: EmulatedCluster, tmp_path: Path) -> None:
    c = cluster
    out = tmp_path / "out"
    out.mkdir()
    c.create(_hooked_pod("kl-evicted", out))
    node = Kubelet(c, tmp_path / "node").start()
    try:
        wait_until(lambda: (out / "started").exists(), 60, "the container to start")
        node.evict("kl-evicted")
        wait_until(
            lambda: (
                (c.get(c.path("v1", "pods", "kl-evicted")) or {}).get("status", {}).get("phase")
                == "Failed"
            ),
            30,
            "the pod failed",
        )
        c.delete(c.path("v1", "pods", "kl-evicted"))  # as the operator deletes a failed pod
        wait_until(lambda: "kl-evicted" in node.terminated, 30, "its termination to end")
        assert node.hooks == []
        assert not (out / "hook").exists()
        assert not (out / "term").exists()  # SIGKILL: no handler ran
    finally:
        node.stop()
