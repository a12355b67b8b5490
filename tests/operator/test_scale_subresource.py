"""The jobs' scale subresource against the API emulation: `kubectl scale arj/NAME` (the real
binary) writes `spec.inference.replicas` and the operator rolls the engines to it; `GET .../scale`
reads the engine count, the engine pods that exist and their selector; what the API server
refuses (the CRD's schema and CEL rules, a stale resourceVersion, a body that is not a `Scale`)
is refused with its answer. The emulation serves the subresource as the apiextensions API
server does (`dressage_testkit.kube.scale`, which quotes the upstream functions)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_testkit.kube import EmulatedCluster

from .conftest import Operator
from .jobs import delete_jobs, job_manifest, pods_of, run_all, status_of
from .waiting import wait_until

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="kubectl is not on PATH (scripts/install-tools.sh puts it in .tools/bin)",
)


@pytest.fixture(autouse=True)
def _delete_jobs_afterwards(cluster: EmulatedCluster) -> Iterator[None]:
    yield
    delete_jobs(cluster, (("v1", "pods"), ("apps/v1", "deployments")))


def _kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _scale(c: EmulatedCluster, name: str) -> httpx.Response:
    return c.http.get(c.job_path(name) + "/scale")


def _engines(c: EmulatedCluster, job: str) -> list[str]:
    return sorted(n for n, p in pods_of(c, job).items() if "-engine-" in n)


def test_kubectl_scale_rolls_the_engines_and_the_scale_reads_them(
    cluster: EmulatedCluster, operator: Operator, kubeconfig: Path
) -> None:
    c = cluster
    c.create(job_manifest("kscale"))
    run_all(c, "kscale")
    done = _kubectl(kubeconfig, "scale", "arj/kscale", "--replicas=3")
    assert done.returncode == 0, done.stderr
    assert "asyncrljob.dressage.io/kscale scaled" in done.stdout
    assert (c.get(c.job_path("kscale")) or {})["spec"]["inference"]["replicas"] == 3
    wanted = [f"kscale-engine-{i}" for i in range(3)]
    wait_until(lambda: _engines(c, "kscale") == wanted, what="three engines")
    wait_until(lambda: status_of(c, "kscale")["inference"]["replicas"] == 3, what="counted")
    scale = _scale(c, "kscale").json()
    assert (scale["apiVersion"], scale["kind"]) == ("autoscaling/v1", "Scale")
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {
        "replicas": 3,
        "selector": "dressage.io/job=kscale,dressage.io/role=inference",
    }
    # With a precondition kubectl reads the scale and writes it back whole (PUT).
    down = _kubectl(kubeconfig, "scale", "arj/kscale", "--current-replicas=3", "--replicas=1")
    assert down.returncode == 0, down.stderr
    wait_until(lambda: _engines(c, "kscale") == ["kscale-engine-0"], what="one engine")
    stale = _kubectl(kubeconfig, "scale", "arj/kscale", "--current-replicas=3", "--replicas=2")
    assert stale.returncode != 0
    assert "Expected replicas to be 3, was 1" in stale.stderr
    assert status_of(c, "kscale")["restarts"] == 0


def test_discovery_lists_the_scale_as_an_autoscaling_v1_scale(cluster: EmulatedCluster) -> None:
    """`kubectl scale` decodes the subresource as discovery says (client-go `scale`'s
    `discoveryScaleResolver`): the group, version and kind the API server lists for it."""
    listed = cluster.http.get("/apis/dressage.io/v1alpha1").json()["resources"]
    by_name = {r["name"]: r for r in listed}
    scale = by_name["asyncrljobs/scale"]
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    assert sorted(scale["verbs"]) == ["get", "patch", "update"]
    assert by_name["asyncrljobs/status"]["kind"] == "AsyncRLJob"
    assert "arj" in by_name["asyncrljobs"]["shortNames"]


def _autoscaled(name: str, replicas: int = 2) -> dict[str, Any]:
    return job_manifest(
        name,
        inference={"replicas": replicas, "autoscaling": {"minReplicas": 1, "maxReplicas": 3}},
    )


def test_what_the_crd_refuses_is_refused_through_the_scale(
    cluster: EmulatedCluster, kubeconfig: Path
) -> None:
    c = cluster
    c.create(_autoscaled("bounds"))
    outside = _kubectl(kubeconfig, "scale", "arj/bounds", "--replicas=5")
    assert outside.returncode != 0
    assert 'The AsyncRLJob "bounds" is invalid: spec.inference.replicas: Forbidden:' in (
        outside.stderr
    )
    assert "within [autoscaling.minReplicas, autoscaling.maxReplicas]" in outside.stderr
    inside = _kubectl(kubeconfig, "scale", "arj/bounds", "--replicas=3")
    assert inside.returncode == 0, inside.stderr
    response = c.http.patch(
        c.job_path("bounds") + "/scale",
        json={"spec": {"replicas": 0}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 422
    body = response.json()
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        'AsyncRLJob.dressage.io "bounds" is invalid: spec.inference.replicas: Invalid value: '
        "0: spec.inference.replicas in body should be greater than or equal to 1"
    )
    assert body["details"]["causes"][0]["field"] == "spec.inference.replicas"
    assert (c.get(c.job_path("bounds")) or {})["spec"]["inference"]["replicas"] == 3
    assert cluster.refusals("AsyncRLJob", "bounds") == 2


def test_a_stale_or_foreign_scale_is_refused_and_a_json_patch_is_applied(
    cluster: EmulatedCluster,
) -> None:
    c = cluster
    job = c.create(job_manifest("writes", inference={}))
    path = c.job_path("writes") + "/scale"

    def read_at_the_jobs_version() -> dict[str, Any] | None:
        # The scale carries the job's resourceVersion; the operator's status writes move it,
        # so the two reads are retried until no write came between them.
        scale: dict[str, Any] = _scale(c, "writes").json()
        now = c.get(c.job_path("writes")) or {}
        same = scale["metadata"]["resourceVersion"] == now["metadata"]["resourceVersion"]
        return scale if same else None

    scale = wait_until(read_at_the_jobs_version, what="the scale at the job's resourceVersion")
    # Without inference.replicas the schema's default is read, as the API server reads it.
    assert scale["spec"]["replicas"] == 1
    c.patch(c.job_path("writes"), {"metadata": {"labels": {"touched": "yes"}}})
    stale = c.http.put(path, json={**scale, "spec": {"replicas": 3}})
    assert (stale.status_code, stale.json()["reason"]) == (409, "Conflict")
    # Without a resourceVersion the update is unconditional (the operator of this module may
    # write the job's status in between).
    fresh = _scale(c, "writes").json()
    del fresh["metadata"]["resourceVersion"]
    put = c.http.put(path, json={**fresh, "spec": {"replicas": 3}})
    assert (put.status_code, put.json()["spec"]) == (200, {"replicas": 3})
    written = c.get(c.job_path("writes")) or {}
    assert written["metadata"]["generation"] == job["metadata"]["generation"] + 1
    not_scale = c.http.put(path, json={"kind": "AsyncRLJob", "spec": {"replicas": 1}})
    assert not_scale.status_code == 400
    other = c.http.put(path, json={**fresh, "metadata": {"name": "else"}})
    assert (other.status_code, other.json()["reason"]) == (400, "BadRequest")
    json_patch = c.http.patch(
        path,
        json=[{"op": "replace", "path": "/spec/replicas", "value": 4}],
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert (json_patch.status_code, json_patch.json()["spec"]) == (200, {"replicas": 4})
    apply = c.http.patch(path, content=b"spec: {}", headers={"Content-Type": "application/yaml"})
    assert apply.status_code == 415
    missing = c.http.get(c.job_path("nowhere") + "/scale")
    assert (missing.status_code, missing.json()["reason"]) == (404, "NotFound")
