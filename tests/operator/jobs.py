"""Jobs and pods in the API emulation, as the operator tests create, read and play them."""

from __future__ import annotations

from typing import Any

from dressage_testkit.kube import EmulatedCluster

from .waiting import wait_until

CHILD_KINDS = (
    ("v1", "pods"),
    ("apps/v1", "deployments"),
    ("v1", "configmaps"),
    ("v1", "services"),
)


def delete_jobs(c: EmulatedCluster, kinds: tuple[tuple[str, str], ...] = CHILD_KINDS) -> None:
    """Delete every job and, as the garbage collector would, every child of `kinds`; return once
    the jobs are gone. A job carries the operator's finalizer, so it outlives the DELETE until
    the operator has let it go: a next test that creates a job of the same name would otherwise
    meet 409 Conflict."""
    for job in c.items("dressage.io/v1alpha1", "asyncrljobs"):
        c.delete(c.job_path(job["metadata"]["name"]))
    for api_version, plural in kinds:
        for obj in c.items(api_version, plural):
            c.delete(c.path(api_version, plural, obj["metadata"]["name"]))
    wait_until(
        lambda: not c.items("dressage.io/v1alpha1", "asyncrljobs"),
        timeout=60,
        what="the deleted jobs gone (the operator removes its finalizer)",
    )


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": {"source": "builtin:tiny"},
        "trainer": {"nodes": 2, "gpusPerNode": 0},
        "inference": {"replicas": 2},
        "storage": {"persistentVolumeClaim": "shared"},
    }
    base.update(spec)
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": name},
        "spec": base,
    }


def pods_of(c: EmulatedCluster, job: str) -> dict[str, dict[str, Any]]:
    return {
        p["metadata"]["name"]: p
        for p in c.items("v1", "pods")
        if p["metadata"].get("labels", {}).get("dressage.io/job") == job
    }


def status_of(c: EmulatedCluster, job: str) -> dict[str, Any]:
    body = c.get(c.job_path(job)) or {}
    status: dict[str, Any] = body.get("status") or {}
    return status


def set_phase(c: EmulatedCluster, pod: str, phase: str, **extra: Any) -> None:
    ready = "True" if phase == "Running" else "False"
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": ready}], **extra}
    c.patch(c.path("v1", "pods", pod), {"status": status})


def run_all(c: EmulatedCluster, job: str) -> dict[str, dict[str, Any]]:
    pods = wait_until(lambda: len(pods_of(c, job)) == 4 and pods_of(c, job), what="4 pods")
    for name in pods:
        set_phase(c, name, "Running")
    wait_until(lambda: status_of(c, job).get("phase") == "Running", what="Running")
    return pods_of(c, job)


def uids(pods: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: p["metadata"]["uid"] for name, p in pods.items()}
