"""Scale-down drains before the engine goes: the operator as a real kopf process against the
Kubernetes API emulation (see test_operator_e2e.py for what the emulation does and does not).

The emulation has no kubelet, so nothing runs the engine pods' `preStop` hook here (the
proxy's integration tests run the hook's program against a real proxy and engines). What the
operator owns is tested: every engine pod it makes carries the hook and the grace period and
passes the real Pod schema, and a scale-down deletes the engine pod while the proxy's engine
list still holds it (its hook drains it through the proxy, which must still know it), the list
dropping it only once the pod is gone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
from dressage_operator.children.engine import DRAIN_HOOK, ENGINE_GRACE_PERIOD_SECONDS
from dressage_testkit.kube import EmulatedCluster

from .conftest import Operator
from .jobs import delete_jobs, job_manifest, pods_of, run_all
from .waiting import wait_until

K8S_VERSION = "1.33.0"


@pytest.fixture(autouse=True)
def _delete_jobs_afterwards(cluster: EmulatedCluster) -> Iterator[None]:
    yield
    delete_jobs(cluster, (("v1", "pods"), ("apps/v1", "deployments")))


class _Watcher:
    """Samples the engine list and the engine pods over and over in a thread, recording every
    moment an engine pod existed while the list did not hold it."""

    def __init__(self, c: EmulatedCluster, job: str) -> None:
        self.c, self.job = c, job
        self.unlisted: list[tuple[str, list[str]]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def listed(self) -> list[str]:
        configmap = self.c.get(self.c.path("v1", "configmaps", f"{self.job}-config")) or {}
        return str(configmap.get("data", {}).get("engines", "")).split()

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = [n for n in pods_of(self.c, self.job) if "-engine-" in n]
            listed = self.listed()  # read after the pods: a pod seen is still there or gone
            hosts = {url.split("//", 1)[1].split(".", 1)[0] for url in listed}
            self.unlisted += [(pod, listed) for pod in pods if pod not in hosts]
            self.samples += 1

    def __enter__(self) -> _Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_scale_down_deletes_an_engine_the_proxy_still_lists_and_unlists_it_once_gone(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("drain", inference={"replicas": 2}))
    pods = run_all(c, "drain")
    for name in ("drain-engine-0", "drain-engine-1"):
        pod = pods[name]
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "Pod", **pod}, K8S_VERSION, strict=True
        )
        (container,) = pod["spec"]["containers"]
        assert container["lifecycle"]["preStop"]["exec"]["command"] == [
            "python",
            "-c",
            DRAIN_HOOK,
        ]
        assert pod["spec"]["terminationGracePeriodSeconds"] == ENGINE_GRACE_PERIOD_SECONDS
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DRESSAGE_PROXY_URL"] == "http://drain-proxy.e2e.svc:8000"
        assert env["DRESSAGE_ENGINE_URL"].startswith(f"http://{name}.drain-engine.e2e.svc:")

    with _Watcher(c, "drain") as watcher:
        wait_until(lambda: len(watcher.listed()) == 2, what="two engines listed")
        c.patch(c.job_path("drain"), {"spec": {"inference": {"replicas": 1}}})
        wait_until(
            lambda: "drain-engine-1" not in pods_of(c, "drain"), what="drain-engine-1 deleted"
        )
        wait_until(lambda: len(watcher.listed()) == 1, what="the list without drain-engine-1")
    assert watcher.samples > 0
    assert watcher.unlisted == [], "an engine pod existed that the proxy's list did not hold"
    assert watcher.listed() == [env["DRESSAGE_ENGINE_URL"].replace("engine-1", "engine-0")]
