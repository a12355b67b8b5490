"""A job runs end to end the way it would on a cluster: the real operator process against the
Kubernetes API emulation, its pods run as local processes by a test kubelet
(`tests/operator/kubelet.py`), every container started from exactly the command, environment
and volumes the operator declared.

The job names its model by a hub id (`acme/tiny`); the model sits in a Hugging Face cache on
the job's shared storage, laid out as the hub writes it, and the job stages offline
(`model.hubOffline`: the operator sets `HF_HUB_OFFLINE=1`), so the real `dressage stage-model`
init containers stage it from there.
The proxy's bearer token comes from a Secret (`secretKeyRef`). Engine pods run the embedded
engine in place of SGLang (`kubelet_engine.sglang_as_embedded` maps the flags it needs and
refuses any other one), playing the oldest tested SGLang release: the cluster churn and the
distributed weight-sync jobs play the newest, so each release runs a whole cluster job, and
what differs between releases is pinned per release by the engine, weight-sync and `dressage
run` tests and the contract tier. Every child is validated against the Kubernetes schemas.
The job trains, engine 1 is evicted mid-run and the operator replaces it without a trainer
gang restart, weights are published every step, and every liveness and readiness probe the
operator declared answers within its timeout throughout, publishes included.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from dressage_testkit.kube import EmulatedCluster

from dressage.api.sglang import SGLANG_OLDEST_TESTED

from .cluster_job import (
    CHILD_KINDS,
    JOB,
    TRAINER,
    cluster,
    job_children,
    job_manifest,
    job_status,
    kubelet,
    proxy_health,
    served_versions,
    start_operator,
    steps_done,
)
from .kubelet import Kubelet
from .waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["cluster", "kubelet"]  # the fixtures
K8S_VERSION = "1.33.0"
STEPS = 10
"""Enough that the trainer, held from about its fourth step until the replacement is taken in,
has steps left to publish to the replacement."""


def _children(c: EmulatedCluster) -> list[dict[str, Any]]:
    """The job's children as the operator wrote them, its NetworkPolicy included."""
    return job_children(c, JOB, (*CHILD_KINDS, ("networking.k8s.io/v1", "networkpolicies")))


@pytest.mark.parametrize("release", [SGLANG_OLDEST_TESTED], ids=lambda r: f"sglang-{r}")
def test_a_hub_model_job_trains_through_an_engine_replacement_with_probes_passing(
    cluster: EmulatedCluster, kubelet: Kubelet, tmp_path: Path, release: str
) -> None:
    c = cluster
    operator = start_operator(
        c,
        kubelet,
        tmp_path,
        DRESSAGE_OPERATOR_SCRAPE_URL_TEMPLATE=(
            f"http://127.0.0.1:{kubelet.port(TRAINER, 9400)}/metrics"
        ),
    )
    try:
        kubelet.start()
        c.create(job_manifest(release, STEPS))
        children = wait_until(
            lambda: len(_children(c)) >= 9 and _children(c), 60, "the job's 9 children"
        )
        for obj in children:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)

        wait_until(lambda: steps_done(kubelet) >= 2, 120, "two trainer steps")
        old_engine = c.get(c.path("v1", "pods", f"{JOB}-engine-1"))
        assert old_engine is not None
        old_uid = old_engine["metadata"]["uid"]
        evicted_at = time.monotonic()
        kubelet.evict(f"{JOB}-engine-1")
        # The trainer publishes after the eviction, the proxy not knowing yet or having marked
        # the dead engine down: either way the publish leaves it out.
        at_eviction = steps_done(kubelet)
        wait_until(
            lambda: steps_done(kubelet) > at_eviction, 120, "a trainer step after the eviction"
        )
        # Then the trainer is held, wherever it stands, until the proxy takes the replacement
        # in, so the job cannot end first and its next publish is to the replacement too.
        kubelet.freeze(TRAINER)
        try:

            def replaced() -> bool:
                pod = c.get(c.path("v1", "pods", f"{JOB}-engine-1"))
                return (
                    pod is not None
                    and pod["metadata"]["uid"] != old_uid
                    and kubelet.ready(f"{JOB}-engine-1")
                )

            wait_until(replaced, 120, "engine 1 replaced and ready")

            def taken_in() -> bool:
                # The trainer may be held in the middle of a publish, the proxy paused: the
                # proxy still probes an engine it has not taken in, and takes it in on a pass.
                health = proxy_health(kubelet)
                return health is not None and sum(e["healthy"] for e in health["engines"]) == 2

            wait_until(taken_in, 120, "the proxy to take the replacement in")
            held_at = steps_done(kubelet)
            assert held_at <= STEPS - 2, f"the job ran too far before it was held ({held_at})"
        finally:
            kubelet.thaw(TRAINER)
        new_engine = c.get(c.path("v1", "pods", f"{JOB}-engine-1"))
        assert new_engine is not None
        kubernetes_validate.validate(new_engine, K8S_VERSION, strict=True)  # with its status
        status = wait_until(
            lambda: job_status(c).get("phase") in ("Succeeded", "Failed") and job_status(c),
            180,
            "the job to finish",
        )
    finally:
        operator.stop()
    trainer_log = kubelet.log_text(TRAINER, "trainer")
    assert status["phase"] == "Succeeded", f"{json.dumps(status)}\n{trainer_log[-3000:]}"
    assert f"step {STEPS} version v{STEPS}" in trainer_log, trainer_log[-3000:]
    assert status["inference"]["restarts"] >= 1
    # The replacement cost no trainer gang restart.
    assert status["restarts"] == 0, f"{json.dumps(status)}\n{trainer_log[-3000:]}"
    # The operator scraped the real trainer's /metrics into the job's status while it ran.
    assert (status.get("staleness") or {}).get("step", 0) >= 1, json.dumps(status)
    # Its token ledger too: the accounts by entry, adding up to the ledger's total.
    ledger = status["staleness"].get("ledgerTokensByReason") or {}
    assert ledger.get("trained", 0) > 0, json.dumps(status)
    assert sum(ledger.values()) == status["staleness"]["ledgerTokens"], json.dumps(status)

    # The model was staged once from the offline cache, as files, and read by every pod.
    staged = kubelet.root / "claims" / "shared" / "models" / "acme--tiny"
    assert (staged / ".dressage-staged.json").is_file()
    assert not (staged / "model.safetensors").is_symlink()
    stage_logs = [
        kubelet.log_text(pod, "stage-model")
        for pod in (f"{JOB}-trainer-0", f"{JOB}-engine-0", f"{JOB}-proxy-0")
    ]
    assert all("model acme/tiny" in log for log in stage_logs), stage_logs

    # Probes: once a container was up (startup probe passed, or first ready), liveness and
    # readiness never failed or ran past their timeout (the evicted engine's after its
    # eviction aside), and they answered across weight publishes.
    probes = list(kubelet.probes)
    first_ready: dict[tuple[str, str], float] = {}
    for p in probes:
        if p.kind == "readinessProbe" and p.ok:
            first_ready.setdefault((p.uid, p.container), p.at)
    steady = [
        p
        for p in probes
        if p.kind != "startupProbe"
        and not (p.uid == old_uid and p.at >= evicted_at)
        and not (
            p.kind == "readinessProbe"
            and p.at < first_ready.get((p.uid, p.container), float("inf"))
        )
    ]
    bad = [p for p in steady if not p.ok or p.seconds > p.timeout_s]
    assert bad == [], bad[:5]
    assert len(steady) >= 20
    engine0 = [p for p in steady if p.pod == f"{JOB}-engine-0" and p.kind == "livenessProbe"]
    versions = served_versions(engine0)
    assert len(versions) >= 3, versions  # the base model and at least two published versions
    replacement = [p for p in probes if p.uid == new_engine["metadata"]["uid"]]
    assert any(p.kind == "startupProbe" and p.ok for p in replacement)
    # The publishes after the thaw brought the replacement to a published version.
    served = served_versions([p for p in replacement if p.kind == "livenessProbe"])
    assert served, "the replacement answered no liveness probe with a version"
    assert served[-1] != "v0", served
