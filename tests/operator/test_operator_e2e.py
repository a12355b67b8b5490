"""The operator under kopf against a Kubernetes API emulation over real HTTP (kmock).

The emulation stores objects and streams watch events but has no kubelet, no garbage
collector and only the few validation rules `dressage_testkit.kube` lists: the tests play
the kubelet by patching pod status, check owner references instead of cascading deletion, and
validate every generated object against the real Kubernetes schemas (kubernetes-validate,
strict) themselves.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml
from dressage_testkit.kube import ENFORCE_LABEL, EmulatedCluster

from dressage import metrics as names

from .conftest import MetricsServer, Operator
from .jobs import delete_jobs, job_manifest, pods_of, run_all, set_phase, status_of, uids
from .waiting import wait_until

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
CLUSTER_EXAMPLES = [p for p in EXAMPLES if not p.name.startswith("local-")]
LOCAL_EXAMPLES = [p for p in EXAMPLES if p.name.startswith("local-")]
K8S_VERSION = "1.33.0"


@pytest.fixture(autouse=True)
def _delete_jobs_afterwards(cluster: EmulatedCluster) -> Iterator[None]:
    """Delete the test's jobs, and their pods and proxies as the garbage collector would."""
    yield
    delete_jobs(cluster, (("v1", "pods"), ("apps/v1", "deployments")))


def test_create_makes_every_child_and_pod_status_drives_phases(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    job = c.create(job_manifest("life", proxy={"replicas": 1}))
    pods = wait_until(lambda: len(pods_of(c, "life")) == 4 and pods_of(c, "life"), what="pods")
    assert sorted(pods) == ["life-engine-0", "life-engine-1", "life-trainer-0", "life-trainer-1"]
    services = {s["metadata"]["name"]: s for s in c.items("v1", "services")}
    deployments = wait_until(lambda: c.items("apps/v1", "deployments"), what="proxy")
    configmap = c.get(c.path("v1", "configmaps", "life-config"))
    assert configmap is not None
    policy = c.get(c.path("networking.k8s.io/v1", "networkpolicies", "life-serving"))
    assert policy is not None
    children = [*pods.values(), *deployments, configmap, policy]
    children += [services[n] for n in ("life-trainer", "life-engine", "life-proxy")]
    for obj in children:
        obj = {"apiVersion": obj.get("apiVersion", "v1"), **obj}
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == (
            "AsyncRLJob",
            "life",
            job["metadata"]["uid"],
        )
    trainer = pods["life-trainer-1"]["spec"]
    env = {e["name"]: e["value"] for e in trainer["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "life-trainer-0.life-trainer.e2e.svc"
    assert env["NODE_RANK"] == "1"
    assert services["life-trainer"]["spec"]["clusterIP"] == "None"
    (proxy,) = [d for d in deployments if d["metadata"]["name"] == "life-proxy"]
    assert proxy["spec"]["replicas"] == 1
    assert wait_until(lambda: status_of(c, "life").get("phase") == "Pending", what="Pending")

    run_all(c, "life")
    status = status_of(c, "life")
    assert status["trainer"] == {"desired": 2, "ready": 2, "failed": 0, "restarts": 0}
    assert status["observedGeneration"] == 1
    assert status["startTime"]

    for name in ("life-trainer-0", "life-trainer-1"):
        set_phase(c, name, "Succeeded")
    wait_until(lambda: status_of(c, "life").get("phase") == "Succeeded", what="Succeeded")
    wait_until(
        lambda: sorted(pods_of(c, "life")) == ["life-trainer-0", "life-trainer-1"],
        what="engines torn down",
    )
    wait_until(
        lambda: c.get(c.path("apps/v1", "deployments", "life-proxy")) is None,
        what="proxy torn down",
    )
    status = status_of(c, "life")
    assert status["completionTime"]
    assert {x["type"]: x["status"] for x in status["conditions"]}["Succeeded"] == "True"


def test_failed_trainer_pod_restarts_the_gang_and_counts_it(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("gang", failurePolicy={"maxRestarts": 1}))
    before = uids(run_all(c, "gang"))
    set_phase(c, "gang-trainer-1", "Failed", reason="Evicted", message="node lost")
    wait_until(lambda: status_of(c, "gang").get("restarts") == 1, what="restart counted")

    def new_gang() -> bool:
        pods = pods_of(c, "gang")
        trainers = [p for n, p in pods.items() if "trainer" in n]
        return len(trainers) == 2 and all(
            p["metadata"]["labels"]["dressage.io/gang"] == "1" for p in trainers
        )

    wait_until(new_gang, what="a new gang")
    after = uids(pods_of(c, "gang"))
    assert after["gang-trainer-0"] != before["gang-trainer-0"]
    assert after["gang-trainer-1"] != before["gang-trainer-1"]
    assert after["gang-engine-0"] == before["gang-engine-0"]  # engines untouched
    status = status_of(c, "gang")
    assert status["phase"] == "Restarting"
    assert "Evicted" in status["message"]
    assert status["trainer"]["failed"] == 1

    # The restart budget is spent: the next failure fails the job.
    for name in ("gang-trainer-0", "gang-trainer-1"):
        set_phase(c, name, "Running")
    wait_until(lambda: status_of(c, "gang").get("phase") == "Running", what="Running again")
    set_phase(c, "gang-trainer-0", "Failed")
    wait_until(lambda: status_of(c, "gang").get("phase") == "Failed", what="Failed")
    failed = {x["type"]: x for x in status_of(c, "gang")["conditions"]}["Failed"]
    assert failed["reason"] == "MaxRestartsExceeded"
    assert "maxRestarts=1" in failed["message"]


def test_a_force_deleted_trainer_pod_restarts_the_gang_and_counts_it(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    """The emulation deletes at once, as a force delete or the pod GC after a lost node does:
    the pod never passes through Failed."""
    c = cluster
    c.create(job_manifest("lost"))
    before = uids(run_all(c, "lost"))
    c.delete(c.path("v1", "pods", "lost-trainer-1"))
    wait_until(lambda: status_of(c, "lost").get("restarts") == 1, what="restart counted")

    def new_gang() -> bool:
        trainers = [p for n, p in pods_of(c, "lost").items() if "trainer" in n]
        return len(trainers) == 2 and all(
            p["metadata"]["labels"]["dressage.io/gang"] == "1" for p in trainers
        )

    wait_until(new_gang, what="a new gang")
    after = uids(pods_of(c, "lost"))
    assert after["lost-trainer-0"] != before["lost-trainer-0"]
    assert after["lost-engine-0"] == before["lost-engine-0"]
    status = status_of(c, "lost")
    assert status["trainer"]["failed"] == 1
    assert "lost-trainer-1 was lost" in status["message"]
    assert status["restarts"] == 1


def test_failed_inference_pod_is_replaced_alone(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("engines"))
    before = uids(run_all(c, "engines"))
    set_phase(c, "engines-engine-1", "Failed", reason="Evicted")
    wait_until(
        lambda: (
            uids(pods_of(c, "engines")).get("engines-engine-1", before["engines-engine-1"])
            != before["engines-engine-1"]
        ),
        what="engine replaced",
    )
    after = uids(pods_of(c, "engines"))
    assert {k: v for k, v in after.items() if k != "engines-engine-1"} == {
        k: v for k, v in before.items() if k != "engines-engine-1"
    }
    status = wait_until(
        lambda: status_of(c, "engines")["inference"]["failed"] == 1 and status_of(c, "engines"),
        what="failure counted",
    )
    assert status["restarts"] == 0
    assert status["inference"]["restarts"] == 1
    assert status["phase"] == "Running"


@dataclass(frozen=True)
class _Scaled:
    replicas: int
    pods: list[str]
    urls: list[str]


def _scaled(replicas: int) -> _Scaled:
    """The engine pods and listed URLs of job `scale` at `replicas` engines."""
    return _Scaled(
        replicas,
        [f"scale-engine-{i}" for i in range(replicas)],
        [f"http://scale-engine-{i}.scale-engine.e2e.svc:30000" for i in range(replicas)],
    )


def test_scaling_engines_changes_engine_pods_and_the_proxys_list_only(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    """`inference.replicas` rolls out: engine pods are created or deleted (highest index
    first), the ConfigMap's engine list follows, and neither the trainer gang nor the proxy
    Deployment is touched (the proxy follows the list, the trainer reads it from the proxy)."""
    c = cluster
    c.create(job_manifest("scale"))
    before = uids(run_all(c, "scale"))
    proxy_path = c.path("apps/v1", "deployments", "scale-proxy")
    proxy = c.get(proxy_path)
    assert proxy is not None
    command = proxy["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--engine-urls-file") + 1] == "/etc/dressage/engines"

    def listed() -> list[str]:
        configmap = c.get(c.path("v1", "configmaps", "scale-config")) or {}
        return str(configmap.get("data", {}).get("engines", "")).split()

    def engines() -> list[str]:
        return sorted(n for n in pods_of(c, "scale") if "-engine-" in n)

    assert listed() == _scaled(2).urls
    for replicas in (3, 1):
        c.patch(c.job_path("scale"), {"spec": {"inference": {"replicas": replicas}}})
        scaled = _scaled(replicas)
        wait_until(lambda: engines() == scaled.pods, what=f"engine pods {scaled.pods}")  # noqa: B023
        wait_until(lambda: listed() == scaled.urls, what=f"{scaled.urls} listed")  # noqa: B023
        status = wait_until(
            lambda: (
                status_of(c, "scale")["inference"]["desired"] == scaled.replicas  # noqa: B023
                and status_of(c, "scale")
            ),
            what="status follows",
        )
        assert status["restarts"] == 0
    after = uids(pods_of(c, "scale"))
    assert {n: after[n] for n in ("scale-trainer-0", "scale-trainer-1", "scale-engine-0")} == {
        n: before[n] for n in ("scale-trainer-0", "scale-trainer-1", "scale-engine-0")
    }
    kept = c.get(proxy_path)
    assert kept is not None
    assert kept["metadata"]["uid"] == proxy["metadata"]["uid"]
    assert kept["metadata"]["annotations"] == proxy["metadata"]["annotations"]


def test_suspend_deletes_pods_and_resume_recreates_them(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.create(job_manifest("pause"))
    run_all(c, "pause")
    c.patch(c.job_path("pause"), {"spec": {"suspend": True}})
    wait_until(lambda: status_of(c, "pause").get("phase") == "Suspended", what="Suspended")
    wait_until(lambda: not pods_of(c, "pause"), what="pods deleted")
    wait_until(
        lambda: c.get(c.path("apps/v1", "deployments", "pause-proxy")) is None, what="proxy deleted"
    )
    assert c.get(c.job_path("pause")) is not None
    assert c.get(c.path("v1", "configmaps", "pause-config")) is not None
    c.patch(c.job_path("pause"), {"spec": {"suspend": False}})
    wait_until(lambda: len(pods_of(c, "pause")) == 4, what="pods recreated")
    status = wait_until(
        lambda: status_of(c, "pause").get("phase") == "Pending" and status_of(c, "pause"),
        what="Pending after resume",
    )
    assert status["observedGeneration"] == 3
    suspended = {x["type"]: x for x in status["conditions"]}["Suspended"]
    assert (suspended["status"], suspended["reason"]) == ("False", "JobResumed")


def test_ttl_deletes_the_finished_job(cluster: EmulatedCluster, operator: Operator) -> None:
    c = cluster
    c.create(job_manifest("ttl", ttlSecondsAfterFinished=1, trainer={"nodes": 1}))
    wait_until(lambda: "ttl-trainer-0" in pods_of(c, "ttl"), what="trainer")
    set_phase(c, "ttl-trainer-0", "Succeeded")
    wait_until(lambda: status_of(c, "ttl").get("phase") == "Succeeded", what="Succeeded")
    wait_until(lambda: c.get(c.job_path("ttl")) is None, timeout=10, what="job deleted by TTL")


@pytest.mark.parametrize(
    ("name", "spec", "field"),
    [
        ("bad-keep", {"staleness": {"keepVersions": -1}}, "spec.staleness.keepVersions"),
        ("bad-model", {"model": None}, "spec.model"),
        ("bad-type", {"rollout": {"groupSize": "many"}}, "spec.rollout.groupSize"),
        ("bad-mode", {"rollout": {"mode": "sometimes"}}, "spec.rollout.mode"),
        (
            "bad-env",
            {"trainer": {"template": {"env": [{"name": "MASTER_ADDR", "value": "x"}]}}},
            "spec.trainer.template.env[0].name",
        ),
        ("bad-cpu", {"proxy": {"resources": {"limits": {"cpu": "2 cores"}}}}, "limits.cpu"),
    ],
)
def test_invalid_spec_is_refused_with_the_field_named_and_not_retried(
    cluster: EmulatedCluster, operator: Operator, name: str, spec: dict[str, Any], field: str
) -> None:
    c = cluster
    manifest = job_manifest(name, **spec)
    manifest["spec"] = {k: v for k, v in manifest["spec"].items() if v is not None}
    c.create(manifest)
    status = wait_until(
        lambda: status_of(c, name).get("phase") == "Failed" and status_of(c, name), what="Failed"
    )
    cond = {x["type"]: x for x in status["conditions"]}["SpecValid"]
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert field in cond["message"]
    version = c.get(c.job_path(name))["metadata"]["resourceVersion"]  # type: ignore[index]
    # A few reconcile wake-ups later nothing was written again and nothing was created.
    c.patch(c.job_path(name), {"metadata": {"labels": {"poke": "1"}}})
    wait_until(lambda: c.get(c.job_path(name))["metadata"]["labels"].get("poke"))  # type: ignore[index]
    poked = c.get(c.job_path(name))["metadata"]["resourceVersion"]  # type: ignore[index]
    assert int(poked) > int(version)
    assert not pods_of(c, name)
    assert c.get(c.job_path(name))["metadata"]["resourceVersion"] == poked  # type: ignore[index]


def test_staleness_reaches_status_and_operator_metrics(
    cluster: EmulatedCluster, operator: Operator, metrics_server: MetricsServer
) -> None:
    c = cluster
    metrics_server.texts["/e2e/stale/metrics"] = "\n".join(
        [
            f"{names.STALENESS_VERSION_SPAN_MEAN} 1.25",
            f"{names.STALENESS_VERSION_SPAN_MAX} 3",
            f"{names.STALENESS_VERSION_SPAN_MIN} 1",
            "# TYPE dressage_dropped_groups counter",
            f'{names.DROPPED_GROUPS}{{reason="stale_version"}} 7',
            "# TYPE dressage_staleness_failures counter",
            f"{names.STALENESS_FAILURES} 2",
            f"{names.TRAIN_STEP} 12",
            f"{names.WEIGHT_VERSION} 12",
            "",
        ]
    )
    c.create(job_manifest("stale"))
    run_all(c, "stale")
    staleness = wait_until(
        lambda: (
            status_of(c, "stale").get("staleness", {}).get("step") == 12
            and status_of(c, "stale")["staleness"]
        ),
        what="staleness in status",
    )
    assert staleness["versionSpanMean"] == 1.25
    assert staleness["versionSpanMax"] == 3
    assert staleness["versionSpanMin"] == 1
    assert staleness["droppedGroups"] == 7
    assert staleness["stalenessFailures"] == 2
    assert staleness["weightVersion"] == "12"
    text = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics").text
    labels = 'dressage_job="stale",namespace="e2e"'
    assert f"{names.JOB_STALENESS_VERSION_SPAN_MEAN}{{{labels}}} 1.25" in text
    assert f"{names.JOB_STALENESS_VERSION_SPAN_MAX}{{{labels}}} 3.0" in text
    assert f'{names.JOB_DROPPED_GROUPS}{{{labels},reason="stale_version"}} 7.0' in text
    assert f"{names.JOB_STALENESS_FAILURES}{{{labels}}} 2.0" in text
    assert f'{names.JOB_PHASE}{{{labels},phase="Running"}} 1.0' in text
    assert f'{names.JOB_ROLLOUT_MODE}{{dressage_job="stale",mode="' in text
    assert f'{names.OPERATOR_RECONCILE}{{result="ok"}}' in text
    assert f"{names.OPERATOR_RECONCILE_DURATION}_count" in text


def test_operator_restart_converges_without_duplicates(
    cluster: EmulatedCluster, operator: Operator, tmp_path: Path
) -> None:
    c = cluster
    c.create(job_manifest("again"))
    before = uids(run_all(c, "again"))
    operator.stop()
    try:
        # While the operator is down an engine fails; the restarted operator sees it.
        set_phase(c, "again-engine-0", "Failed")
    finally:
        operator.start()
    wait_until(lambda: status_of(c, "again")["inference"]["failed"] == 1, what="seen after restart")
    wait_until(lambda: len(pods_of(c, "again")) == 4, what="engine recreated")
    after = uids(pods_of(c, "again"))
    assert after["again-trainer-0"] == before["again-trainer-0"]
    assert after["again-trainer-1"] == before["again-trainer-1"]
    assert after["again-engine-1"] == before["again-engine-1"]
    assert (
        len(
            [d for d in c.items("apps/v1", "deployments") if d["metadata"]["name"] == "again-proxy"]
        )
        == 1
    )
    assert status_of(c, "again")["restarts"] == 0


@pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="kubectl is not on PATH (scripts/install-tools.sh puts it in .tools/bin)",
)
def _kubectl_apply(c: EmulatedCluster, kubeconfig: Path, example: Path) -> str:
    done = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "apply",
            "--validate=false",
            "-n",
            c.namespace,
            "-f",
            str(example),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    name: str = yaml.safe_load(example.read_text())["metadata"]["name"]
    assert f"asyncrljob.dressage.io/{name}" in done.stdout
    return name


@pytest.mark.parametrize("example", CLUSTER_EXAMPLES, ids=lambda p: p.name)
def test_kubectl_apply_of_each_example_is_picked_up(
    cluster: EmulatedCluster, operator: Operator, kubeconfig: Path, example: Path
) -> None:
    c = cluster
    name = _kubectl_apply(c, kubeconfig, example)
    spec = yaml.safe_load(example.read_text())["spec"]
    expected = spec.get("trainer", {}).get("nodes", 1) + spec.get("inference", {}).get(
        "replicas", 1
    )
    wait_until(lambda: len(pods_of(c, name)) == expected, what=f"{expected} pods of {name}")
    status = wait_until(
        lambda: status_of(c, name).get("observedGeneration") and status_of(c, name), what="status"
    )
    assert status["phase"] == "Pending"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
@pytest.mark.parametrize("example", LOCAL_EXAMPLES, ids=lambda p: p.name)
def test_a_local_example_without_shared_storage_is_refused_on_a_cluster(
    cluster: EmulatedCluster, operator: Operator, kubeconfig: Path, example: Path
) -> None:
    """Trainer, engines and proxy are separate pods: without a claim they could not share
    the weights, so the job is refused with the field named and no pod is created."""
    c = cluster
    name = _kubectl_apply(c, kubeconfig, example)
    status = wait_until(
        lambda: status_of(c, name).get("phase") == "Failed" and status_of(c, name), what="Failed"
    )
    cond = {x["type"]: x for x in status["conditions"]}["SpecValid"]
    assert cond["status"] == "False"
    assert cond["message"].startswith("spec.storage.persistentVolumeClaim: required")
    assert not pods_of(c, name)


def test_in_a_restricted_namespace_the_pods_are_admitted_and_a_relaxed_role_is_refused(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    c.label_namespace({ENFORCE_LABEL: "restricted"})
    try:
        c.create(job_manifest("strict"))
        wait_until(lambda: len(pods_of(c, "strict")) == 4, what="4 admitted pods")
        relaxed = {"replicas": 1, "template": {"security": {"profile": "baseline"}}}
        c.create(job_manifest("relaxed", inference=relaxed))
        cond = wait_until(
            lambda: (
                {x["type"]: x for x in status_of(c, "relaxed").get("conditions", [])}.get(
                    "ChildrenApplied", {}
                ).get("status")
                == "False"
                and {x["type"]: x for x in status_of(c, "relaxed")["conditions"]}["ChildrenApplied"]
            ),
            what="ChildrenApplied=False",
        )
        assert cond["reason"] == "PodRefused"
        assert "relaxed-engine-0" in cond["message"]
        assert 'violates PodSecurity "restricted:latest"' in cond["message"]
        # A permanent refusal before the job ran: Failed, and the trainers created beside the
        # refused engine are deleted (nothing waits for an engine that cannot come).
        wait_until(lambda: status_of(c, "relaxed").get("phase") == "Failed", what="Failed")
        failed = {x["type"]: x for x in status_of(c, "relaxed")["conditions"]}["Failed"]
        assert failed["reason"] == "ChildRefused"
        wait_until(lambda: not pods_of(c, "relaxed"), what="the trainers deleted")
    finally:
        c.label_namespace({ENFORCE_LABEL: None})


def test_a_job_recreated_under_the_same_name_never_adopts_the_earlier_jobs_children(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    """The earlier job's children (its uid in their owner reference) are still there, as
    while the garbage collector works through them: the new job leaves them alone and shows
    why, and once they are gone it creates its own."""
    c = cluster
    old_ref = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "name": "reborn",
        "uid": "uid-of-the-earlier-job",
        "controller": True,
    }
    labels = {"dressage.io/job": "reborn", "dressage.io/role": "trainer", "dressage.io/gang": "0"}
    meta = {"labels": labels, "ownerReferences": [old_ref]}
    c.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "reborn-config", **meta},
            "data": {"job.yaml": "old"},
        }
    )
    for i in range(2):
        pod_meta = {"name": f"reborn-trainer-{i}", **meta}
        pod_meta["labels"] = {**labels, "dressage.io/index": str(i)}
        spec = {"containers": [{"name": "trainer", "image": "old:1"}]}
        c.create({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec})
        set_phase(c, f"reborn-trainer-{i}", "Succeeded")
    old_uids = uids(pods_of(c, "reborn"))
    job = c.create(job_manifest("reborn"))

    def applied() -> dict[str, Any]:
        conds = {x["type"]: x for x in status_of(c, "reborn").get("conditions", [])}
        return conds.get("ChildrenApplied", {})

    cond = wait_until(lambda: applied().get("status") == "False" and applied(), what="NotOwned")
    assert cond["reason"] == "ConfigMapNotOwned"
    assert "uid-of-the-earlier-job" in cond["message"]
    assert status_of(c, "reborn")["phase"] == "Pending"  # the old Succeeded pods do not count
    assert uids(pods_of(c, "reborn")) == old_uids
    configmap = c.get(c.path("v1", "configmaps", "reborn-config"))
    assert configmap is not None
    assert configmap["data"] == {"job.yaml": "old"}

    # The garbage collector deletes the earlier job's children.
    c.delete(c.path("v1", "configmaps", "reborn-config"))
    for name in old_uids:
        c.delete(c.path("v1", "pods", name))
    wait_until(lambda: len(pods_of(c, "reborn")) == 4, what="the new job's own pods")
    for obj in [*pods_of(c, "reborn").values(), c.get(c.path("v1", "configmaps", "reborn-config"))]:
        assert obj is not None
        assert obj["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    wait_until(lambda: applied().get("status") == "True", what="ChildrenApplied=True")
    c.delete(c.path("v1", "configmaps", "reborn-config"))
