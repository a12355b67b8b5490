"""`spec.code` through the running operator against the Kubernetes API emulation: the trainer
pods the operator creates carry the job's code and packages and are admitted in a restricted
namespace; a bad value fails the job with the field named and creates nothing."""

from __future__ import annotations

from typing import Any

from dressage_testkit.kube import ENFORCE_LABEL, EmulatedCluster

from .conftest import Operator
from .waiting import wait_until

CODE = {"path": "jobs/maze", "packages": ["numpy>=1.26"]}


def _job(name: str, code: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": name},
        "spec": {
            "model": {"source": "builtin:tiny"},
            "trainer": {"nodes": 2, "gpusPerNode": 0},
            "storage": {"persistentVolumeClaim": "shared"},
            "code": code,
        },
    }


def _pods(c: EmulatedCluster, job: str) -> dict[str, dict[str, Any]]:
    return {
        p["metadata"]["name"]: p
        for p in c.items("v1", "pods")
        if p["metadata"].get("labels", {}).get("dressage.io/job") == job
    }


def _status(c: EmulatedCluster, job: str) -> dict[str, Any]:
    status: dict[str, Any] = (c.get(c.job_path(job)) or {}).get("status") or {}
    return status


def _cleanup(c: EmulatedCluster, name: str) -> None:
    c.delete(c.job_path(name))
    for pod in _pods(c, name):
        c.delete(c.path("v1", "pods", pod))
    for deployment in c.items("apps/v1", "deployments"):
        c.delete(c.path("apps/v1", "deployments", deployment["metadata"]["name"]))


def test_trainer_pods_carry_the_code_and_are_admitted_in_a_restricted_namespace(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.label_namespace({ENFORCE_LABEL: "restricted"})
    try:
        c.create(_job("coded", CODE))
        pods = wait_until(lambda: len(_pods(c, "coded")) == 3 and _pods(c, "coded"), what="pods")
        for name in ("coded-trainer-0", "coded-trainer-1"):
            spec = pods[name]["spec"]
            env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
            assert env["PYTHONPATH"] == "/dressage/jobs/maze"
            (install,) = spec["initContainers"]
            assert install["name"] == "install-packages"
            assert install["command"][-1] == "numpy>=1.26"
        engine = pods["coded-engine-0"]["spec"]
        assert "PYTHONPATH" not in {e["name"] for e in engine["containers"][0]["env"]}
    finally:
        c.label_namespace({ENFORCE_LABEL: None})
        _cleanup(c, "coded")


def test_a_bad_code_value_fails_the_job_naming_the_field(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    try:
        c.create(_job("badcode", {"packages": ["--index-url=https://evil/simple"]}))
        status = wait_until(
            lambda: _status(c, "badcode").get("phase") == "Failed" and _status(c, "badcode"),
            what="Failed",
        )
        cond = {x["type"]: x for x in status["conditions"]}["SpecValid"]
        assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
        assert "spec.code.packages[0]" in cond["message"]
        assert "pip options are not accepted" in cond["message"]
        assert not _pods(c, "badcode")
    finally:
        _cleanup(c, "badcode")
