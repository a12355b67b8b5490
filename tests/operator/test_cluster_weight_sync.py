"""The cluster-shaped run of `test_cluster_run` with `weightSync: distributed`: the trainer
broadcasts every step's weights to the engine pods over per-engine gloo groups, and the engine
set changes under it (engine 1 evicted and replaced, a replica added, one removed) with no
trainer gang restart; every engine that joins serves a published version, and the job ends
with every step trained.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from dressage_operator.testing import EmulatedCluster, operator_env

from dressage.api.sglang import SGLANG_TESTED_RELEASES
from dressage.model import build_tiny_model
from dressage.testing import free_port
from tests.hub_cache import write_hub_cache

from .conftest import Operator
from .kubelet import Kubelet
from .test_cluster_run import (
    JOB,
    TOKEN,
    TRAINER,
    _manifest,
    _proxy_health,
    _status,
    _steps_done,
    _versions,
    cluster,
    kubelet,
)
from .waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
STEPS = 9
__all__ = ["cluster", "kubelet"]  # the fixtures, shared with the disk run


def _distributed(release: str) -> dict[str, Any]:
    manifest = _manifest(release)
    manifest["spec"]["inference"]["weightSync"] = "distributed"
    manifest["spec"]["training"]["steps"] = STEPS
    return manifest


def _healthy(kubelet: Kubelet) -> list[str]:
    health = _proxy_health(kubelet) or {}
    return sorted(e["url"] for e in health.get("engines", []) if e["healthy"])


def _held_until(kubelet: Kubelet, condition: Any, what: str) -> None:
    """Hold the trainer between steps until `condition` holds (letting a publish it was
    stopped inside finish first), so the next publish sees the changed engine set."""
    kubelet.freeze(TRAINER)
    try:

        def settled() -> bool:
            health = _proxy_health(kubelet)
            if health is not None and health["paused"]:
                kubelet.thaw(TRAINER)
                wait_until(
                    lambda: (_proxy_health(kubelet) or {}).get("paused") is False,
                    60,
                    "the publish to finish",
                )
                kubelet.freeze(TRAINER)
                return False
            return bool(condition())

        wait_until(settled, 180, what)
    finally:
        kubelet.thaw(TRAINER)


def _one_more_step(kubelet: Kubelet, what: str) -> None:
    done = _steps_done(kubelet)
    wait_until(lambda: _steps_done(kubelet) > done, 180, what)


@pytest.mark.parametrize("release", SGLANG_TESTED_RELEASES, ids=lambda r: f"sglang-{r}")
def test_distributed_weight_sync_follows_evictions_scale_up_and_scale_down_without_a_restart(
    cluster: EmulatedCluster, kubelet: Kubelet, tmp_path: Path, release: str
) -> None:
    c = cluster
    claim = kubelet.root / "claims" / "shared"
    write_hub_cache(claim / "models" / ".hf-home", "acme/tiny", build_tiny_model(tmp_path / "m"))
    encoded = base64.b64encode(TOKEN.encode()).decode()
    c.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "proxy-token"},
            "data": {"token": encoded},
        }
    )
    env = operator_env(
        c,
        tmp_path / "kubeconfig",
        DRESSAGE_OPERATOR_METRICS_PORT=str(free_port()),
        DRESSAGE_OPERATOR_NETWORK_POLICIES="true",
    )
    operator = Operator(c, env)
    operator.start()
    try:
        kubelet.start()
        c.create(_distributed(release))
        wait_until(lambda: _steps_done(kubelet) >= 1, 180, "a first trainer step")

        # Eviction: engine 1 dies; the operator replaces it.
        old = c.get(c.path("v1", "pods", f"{JOB}-engine-1"))
        assert old is not None
        kubelet.evict(f"{JOB}-engine-1")
        _one_more_step(kubelet, "a trainer step after the eviction")

        def replaced() -> bool:
            pod = c.get(c.path("v1", "pods", f"{JOB}-engine-1"))
            return (
                pod is not None
                and pod["metadata"]["uid"] != old["metadata"]["uid"]
                and kubelet.ready(f"{JOB}-engine-1")
                and len(_healthy(kubelet)) == 2
            )

        _held_until(kubelet, replaced, "engine 1 replaced and taken in by the proxy")
        _one_more_step(kubelet, "a publish to the replacement")

        # Scale-up to 3, then down to 2.
        c.patch(c.job_path(JOB), {"spec": {"inference": {"replicas": 3}}})
        _held_until(
            kubelet,
            lambda: kubelet.ready(f"{JOB}-engine-2") and len(_healthy(kubelet)) == 3,
            "the added engine taken in by the proxy",
        )
        _one_more_step(kubelet, "a publish to the added engine")

        def added_engine_probed_on_a_published_version() -> bool:
            # Scaled down next: first let a probe of it see what it serves (its period is
            # longer than a step, so the scale-down could otherwise come before the probe).
            probes = [
                p
                for p in kubelet.probes
                if p.pod == f"{JOB}-engine-2" and p.kind == "livenessProbe"
            ]
            return any(v != "v0" for v in _versions(probes))

        wait_until(
            added_engine_probed_on_a_published_version,
            120,
            "a probe of the added engine seeing a published version",
        )
        c.patch(c.job_path(JOB), {"spec": {"inference": {"replicas": 2}}})
        _held_until(kubelet, lambda: len(_healthy(kubelet)) == 2, "the scale-down")
        status = wait_until(
            lambda: _status(c).get("phase") in ("Succeeded", "Failed") and _status(c),
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
        served = _versions(
            [p for p in kubelet.probes if p.pod == pod and p.kind == "livenessProbe"]
        )
        assert served, pod
        assert served[-1] != "v0", (pod, served)
