"""The cluster-shaped run of `test_cluster_run` training a LoRA adapter (`model.lora`): the
operator starts the engine pods with SGLang's LoRA flags (the embedded engine takes them as
they are), the trainer writes each version's adapter onto the shared claim, and every engine
loads it by name; the job ends with every step trained and published, no restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dressage_testkit.kube import EmulatedCluster

from dressage.api.sglang import SGLANG_NEWEST_TESTED

from .cluster_job import (
    JOB,
    TRAINER,
    cluster,
    job_manifest,
    job_status,
    kubelet,
    start_operator,
)
from .kubelet import Kubelet
from .waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
STEPS = 4
__all__ = ["cluster", "kubelet"]  # the fixtures


def test_a_lora_job_publishes_an_adapter_every_step_to_every_engine(
    cluster: EmulatedCluster, kubelet: Kubelet, tmp_path: Path
) -> None:
    c = cluster
    manifest = job_manifest(SGLANG_NEWEST_TESTED, STEPS)
    manifest["spec"]["model"]["lora"] = {"rank": 8, "alpha": 16}
    operator = start_operator(c, kubelet, tmp_path)
    try:
        kubelet.start()
        c.create(manifest)
        pod = wait_until(
            lambda: c.get(c.path("v1", "pods", f"{JOB}-engine-0")), 120, "the engine pod"
        )
        status = wait_until(
            lambda: job_status(c).get("phase") in ("Succeeded", "Failed") and job_status(c),
            420,
            "the job to finish",
        )
    finally:
        operator.stop()
    trainer_log = kubelet.log_text(TRAINER, "trainer")
    assert status["phase"] == "Succeeded", f"{json.dumps(status)}\n{trainer_log[-3000:]}"
    assert "training a rank-8 LoRA adapter (base frozen)" in trainer_log, trainer_log[-3000:]
    assert f"step {STEPS} version v{STEPS}" in trainer_log, trainer_log[-3000:]
    assert status["restarts"] == 0
    command = [*pod["spec"]["containers"][0].get("command", []),
               *pod["spec"]["containers"][0].get("args", [])]  # fmt: skip
    assert "--enable-lora" in command
    assert command[command.index("--max-lora-rank") + 1] == "8"
    # The newest version on the claim is an adapter, not a checkpoint of the model.
    adapters = sorted((kubelet.root / "claims" / "shared").rglob("adapter_model.safetensors"))
    assert adapters, "no adapter on the shared claim"
    assert not (adapters[-1].parent / "model.safetensors").exists()
