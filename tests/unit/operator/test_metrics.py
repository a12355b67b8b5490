"""The operator's per-job metrics."""

from __future__ import annotations

from pathlib import Path

from dressage_operator.metrics import OperatorMetrics, version_span_limit
from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.api import load_job
from dressage.api.status import AsyncRLJobStatus, JobPhase

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_version_span_limit_is_exported_per_job_only_when_set() -> None:
    """`dressage_job_staleness_max_version_span` (the chart's version-span alert compares the
    max span with it) is maxPartialRolloutPreempts + 1, and absent for a job without a limit."""
    limited = load_job(EXAMPLES / "multi-node-partial-rollout.yaml")
    preempts = limited.spec.staleness.max_partial_rollout_preempts
    assert preempts is not None
    unlimited = limited.model_copy(deep=True)
    unlimited.spec.staleness.max_partial_rollout_preempts = None
    metrics = OperatorMetrics()
    status = AsyncRLJobStatus(phase=JobPhase.RUNNING)
    metrics.jobs.update("ns", "job-a", status, version_span_limit(limited.spec))
    metrics.jobs.update("ns", "job-b", status, version_span_limit(unlimited.spec))
    text = generate_latest(metrics.registry).decode()
    limit = names.JOB_MAX_VERSION_SPAN_LIMIT
    assert f'{limit}{{dressage_job="job-a",namespace="ns"}} {preempts + 1:.1f}' in text
    assert f'{limit}{{dressage_job="job-b"' not in text
    assert version_span_limit(unlimited.spec) is None


def test_rollout_mode_is_exported_per_job_when_known() -> None:
    """`dressage_job_rollout_mode{mode}` is 1 for the job's mode (the chart's alert on a
    trainer waiting for batches leaves `sync` jobs out by it), absent when unknown, and goes
    with the job."""
    metrics = OperatorMetrics()
    status = AsyncRLJobStatus(phase=JobPhase.RUNNING)
    metrics.jobs.update("ns", "job-a", status, None, "sync")
    metrics.jobs.update("ns", "job-b", status, None)
    mode = names.JOB_ROLLOUT_MODE
    text = generate_latest(metrics.registry).decode()
    assert f'{mode}{{dressage_job="job-a",mode="sync",namespace="ns"}} 1.0' in text
    assert f'{mode}{{dressage_job="job-b"' not in text
    metrics.jobs.update("ns", "job-a", status, None, "fully_async")
    metrics.jobs.remove("ns", "job-b")
    text = generate_latest(metrics.registry).decode()
    assert 'mode="sync"' not in text
    assert f'{mode}{{dressage_job="job-a",mode="fully_async",namespace="ns"}} 1.0' in text
    metrics.jobs.remove("ns", "job-a")
    assert f"{mode}{{" not in generate_latest(metrics.registry).decode()
