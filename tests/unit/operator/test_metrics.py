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
