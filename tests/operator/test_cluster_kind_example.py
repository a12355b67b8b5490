"""The kind quickstart's job, `examples/kind-cpu.yaml`, runs as written on the cluster path: the
real operator against the Kubernetes API emulation, its pods run by the test kubelet from the
commands the operator declared, in a namespace that enforces the Restricted Pod Security
Standard (kind's default namespace enforces none; the job's pods must pass it anyway).

Nothing stands in for SGLang here: the engine pod's command is the embedded engine's own
(`python -m dressage engine serve`, `inference.engine: embedded`), the model is the built-in
tiny Llama every pod builds for itself, and there is no claim: weights reach the engine over a
gloo weight-update group (`weightSync: distributed`). Only `training.steps` is lowered, so the
run ends in a couple of minutes; the job trains, publishes every step to the engine,
evaluates the starting and the final weights on its held-out prompts (in the status too) and
succeeds, and every child passes the Kubernetes schemas.

`kind_job` is the manifest as this test applies it, for other runs of the same job (the test
kubelet's container mode runs it in the built images).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from dressage_testkit.kube import ENFORCE_LABEL, EmulatedCluster, operator_env
from dressage_testkit.processes import free_port

from .cluster_job import cluster, job_children, kubelet, served_versions
from .conftest import Operator
from .kubelet import Kubelet
from .waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["cluster", "kubelet"]  # the fixtures

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kind-cpu.yaml"
K8S_VERSION = "1.33.0"
STEPS = 3


def kind_job(steps: int = STEPS) -> dict[str, Any]:
    """`examples/kind-cpu.yaml` with `training.steps` set to `steps` (the only change)."""
    manifest: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    manifest["spec"]["training"]["steps"] = steps
    return manifest


def test_the_kind_example_trains_and_publishes_with_no_gpu_no_claim_and_no_sglang(
    cluster: EmulatedCluster, kubelet: Kubelet, tmp_path: Path
) -> None:
    c = cluster
    manifest = kind_job()
    job = manifest["metadata"]["name"]
    trainer, engine = f"{job}-trainer-0", f"{job}-engine-0"
    c.label_namespace({ENFORCE_LABEL: "restricted"})
    settings = operator_env(
        c,
        tmp_path / "kubeconfig",
        DRESSAGE_OPERATOR_METRICS_PORT=str(free_port()),
        DRESSAGE_OPERATOR_SCRAPE_URL_TEMPLATE=(
            f"http://127.0.0.1:{kubelet.port(trainer, 9400)}/metrics"
        ),
    )
    operator = Operator(c, settings)
    operator.start()
    try:
        kubelet.start()
        c.create(manifest)
        children = wait_until(
            lambda: len(job_children(c, job)) >= 7 and job_children(c, job),
            60,
            "the job's children",
        )
        for obj in children:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        pods = {o["metadata"]["name"]: o for o in children if o["kind"] == "Pod"}
        (container,) = pods[engine]["spec"]["containers"]
        assert container["command"][:5] == ["python", "-m", "dressage", "engine", "serve"]
        assert "nvidia.com/gpu" not in json.dumps(container["resources"])
        volumes = [v for o in children if o["kind"] == "Pod" for v in o["spec"]["volumes"]]
        assert not [v for v in volumes if "persistentVolumeClaim" in v]
        status = wait_until(
            lambda: (
                (s := (c.get(c.job_path(job)) or {}).get("status") or {}).get("phase")
                in ("Succeeded", "Failed")
                and s
            ),
            300,
            "the job to finish",
        )
    finally:
        operator.stop()
        c.label_namespace({ENFORCE_LABEL: None})
    trainer_log = kubelet.log_text(trainer, "trainer")
    assert status["phase"] == "Succeeded", f"{json.dumps(status)}\n{trainer_log[-3000:]}"
    assert f"step {STEPS} version v{STEPS}" in trainer_log, trainer_log[-3000:]
    assert "weight-update groups formed with" in trainer_log, trainer_log[-3000:]
    assert status["restarts"] == 0, json.dumps(status)
    # The example evaluates on its held-out prompts: the starting weights and the final version
    # (everySteps 25 is beyond the 3 steps), each line naming its one version, and the operator
    # read them from the trainer's /metrics into the status.
    assert "eval v0 " in trainer_log, trainer_log[-3000:]
    assert f"eval v{STEPS} " in trainer_log, trainer_log[-3000:]
    evaluation = status.get("evaluation") or {}
    assert evaluation.get("latest", {}).get("version") in ("v0", f"v{STEPS}"), json.dumps(status)
    assert evaluation.get("best", {}).get("version") in ("v0", f"v{STEPS}"), json.dumps(status)
    # The engine came to serve a version the trainer published (its liveness probe reads the
    # engine's weight version).
    served = served_versions(
        [p for p in kubelet.probes if p.pod == engine and p.kind == "livenessProbe"]
    )
    assert served, kubelet.log_text(engine, "engine")[-3000:]
    assert served[-1] not in ("v0", "base"), served
