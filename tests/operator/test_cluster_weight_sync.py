"""The cluster-shaped run of `test_cluster_run` with `weightSync: distributed`: the trainer
broadcasts every step's weights to the engine pods over per-engine gloo groups, and the engine
set changes under it (engine 1 evicted and replaced, a replica added, one removed) with no
trainer gang restart; every engine that joins serves a published version, and the job ends
with every step trained. The engines play the newest tested SGLang release (what a cluster
installs today); both releases' weight-update protocols run end to end in
`tests/integration/test_run_weight_sync.py` and `test_fleet_weight_sync.py`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dressage_testkit.kube import EmulatedCluster

from dressage.api.sglang import SGLANG_NEWEST_TESTED

from .cluster_job import (
    JOB,
    TRAINER,
    cluster,
    healthy_engines,
    held_until,
    job_manifest,
    job_status,
    kubelet,
    one_more_step,
    served_versions,
    start_operator,
    steps_done,
)
from .kubelet import Kubelet
from .waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
STEPS = 16
__all__ = ["cluster", "kubelet"]  # the fixtures


def _distributed(release: str) -> dict[str, Any]:
    manifest = job_manifest(release, STEPS)
    manifest["spec"]["inference"]["weightSync"] = "distributed"
    return manifest


@pytest.mark.parametrize("release", [SGLANG_NEWEST_TESTED], ids=lambda r: f"sglang-{r}")
def test_distributed_weight_sync_follows_evictions_scale_up_and_scale_down_without_a_restart(
    cluster: EmulatedCluster, kubelet: Kubelet, tmp_path: Path, release: str
) -> None:
    c = cluster
    operator = start_operator(c, kubelet, tmp_path)
    try:
        kubelet.start()
        c.create(_distributed(release))
        wait_until(lambda: steps_done(kubelet) >= 1, 180, "a first trainer step")

        # Eviction: engine 1 dies; the operator replaces it.
        old = c.get(c.path("v1", "pods", f"{JOB}-engine-1"))
        assert old is not None
        kubelet.evict(f"{JOB}-engine-1")
        one_more_step(kubelet, "a trainer step after the eviction")

        def replaced() -> bool:
            pod = c.get(c.path("v1", "pods", f"{JOB}-engine-1"))
            return (
                pod is not None
                and pod["metadata"]["uid"] != old["metadata"]["uid"]
                and kubelet.ready(f"{JOB}-engine-1")
                and len(healthy_engines(kubelet)) == 2
            )

        held_until(kubelet, replaced, "engine 1 replaced and taken in by the proxy")
        one_more_step(kubelet, "a publish to the replacement")

        # Scale-up to 3, then down to 2.
        c.patch(c.job_path(JOB), {"spec": {"inference": {"replicas": 3}}})
        held_until(
            kubelet,
            lambda: kubelet.ready(f"{JOB}-engine-2") and len(healthy_engines(kubelet)) == 3,
            "the added engine taken in by the proxy",
        )
        one_more_step(kubelet, "a publish to the added engine")

        def added_engine_probed_on_a_published_version() -> bool:
            # Scaled down next: first let a probe of it see what it serves (its period is
            # longer than a step, so the scale-down could otherwise come before the probe).
            probes = [
                p
                for p in kubelet.probes
                if p.pod == f"{JOB}-engine-2" and p.kind == "livenessProbe"
            ]
            return any(v != "v0" for v in served_versions(probes))

        wait_until(
            added_engine_probed_on_a_published_version,
            120,
            "a probe of the added engine seeing a published version",
        )
        c.patch(c.job_path(JOB), {"spec": {"inference": {"replicas": 2}}})
        held_until(kubelet, lambda: len(healthy_engines(kubelet)) == 2, "the scale-down")
        status = wait_until(
            lambda: job_status(c).get("phase") in ("Succeeded", "Failed") and job_status(c),
            300,
            "the job to finish",
        )
    finally:
        operator.stop()
    trainer_log = kubelet.log_text(TRAINER, "trainer")
    assert status["phase"] == "Succeeded", f"{json.dumps(status)}\n{trainer_log[-3000:]}"
    assert f"step {STEPS} version v{STEPS}" in trainer_log, trainer_log[-3000:]
    assert "weight-update groups formed with" in trainer_log, trainer_log[-3000:]
    assert status["restarts"] == 0, f"{json.dumps(status)}\n{trainer_log[-3000:]}"
    # Every engine pod that ever ran, the replacement and the added one included, came to
    # serve a published version (the proxy routes only to engines on the current one).
    for pod in (f"{JOB}-engine-0", f"{JOB}-engine-1", f"{JOB}-engine-2"):
        served = served_versions(
            [p for p in kubelet.probes if p.pod == pod and p.kind == "livenessProbe"]
        )
        assert served, pod
        assert served[-1] != "v0", (pod, served)
