"""The fleet's per-job series on the operator's `/metrics`: engines asked for and ready, the
autoscaler's changes by direction (mirroring the status's counts), its last decision and its
signals; a job without autoscaling exports only its engine counts."""

from __future__ import annotations

from dressage_operator.metrics import OperatorMetrics
from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.api.scale_status import AutoscalingStatus
from dressage.api.status import AsyncRLJobStatus, InferenceStatus


def test_the_autoscalers_decisions_and_signals_are_exported_per_job() -> None:
    metrics = OperatorMetrics()
    autoscaled = AsyncRLJobStatus(
        inference=InferenceStatus(desired=4, ready=3),
        autoscaling=AutoscalingStatus(
            desired_replicas=4,
            scale_up_count=3,
            scale_down_count=1,
            trainer_wait_fraction=0.42,
            admission_held_fraction=0.0,
        ),
    )
    metrics.jobs.update("ns", "auto", autoscaled)
    metrics.jobs.update("ns", "fixed", AsyncRLJobStatus(inference=InferenceStatus(desired=2)))
    text = generate_latest(metrics.registry).decode()
    auto = 'dressage_job="auto",namespace="ns"'
    assert f'{names.JOB_ENGINE_SCALE_EVENTS}{{direction="up",{auto}}} 3.0' in text
    assert f'{names.JOB_ENGINE_SCALE_EVENTS}{{direction="down",{auto}}} 1.0' in text
    assert f"{names.JOB_AUTOSCALER_DESIRED_ENGINES}{{{auto}}} 4.0" in text
    assert f"{names.JOB_TRAINER_WAIT_FRACTION}{{{auto}}} 0.42" in text
    assert f"{names.JOB_ADMISSION_HELD_FRACTION}{{{auto}}} 0.0" in text
    assert f'{names.JOB_ENGINES}{{{auto},state="ready"}} 3.0' in text
    fixed = 'dressage_job="fixed",namespace="ns"'
    assert f'{names.JOB_ENGINES}{{{fixed},state="desired"}} 2.0' in text
    assert f"{names.JOB_AUTOSCALER_DESIRED_ENGINES}{{{fixed}}}" not in text
    metrics.jobs.remove("ns", "auto")
    assert 'dressage_job="auto"' not in generate_latest(metrics.registry).decode()
