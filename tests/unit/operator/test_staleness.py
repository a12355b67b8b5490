"""Reading the staleness figures from a job's Prometheus text, and exporting them per job."""

from __future__ import annotations

from dressage_operator.metrics import OperatorMetrics
from dressage_operator.staleness_scrape import ScrapeResult, parse_staleness
from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.api.status import AsyncRLJobStatus, JobPhase

from .support import condition, decide_for, make_job, running_pods

RUNTIME_METRICS = f"""
# TYPE {names.STALENESS_VERSION_SPAN_MEAN} gauge
{names.STALENESS_VERSION_SPAN_MEAN} 1.5
# TYPE {names.STALENESS_VERSION_SPAN_MAX} gauge
{names.STALENESS_VERSION_SPAN_MAX} 3
# TYPE {names.STALENESS_VERSION_SPAN_MIN} gauge
{names.STALENESS_VERSION_SPAN_MIN} 1
# TYPE dressage_dropped_groups counter
{names.DROPPED_GROUPS}{{reason="stale_version"}} 4
{names.DROPPED_GROUPS}{{reason="retries_exhausted"}} 1
# TYPE dressage_staleness_failures counter
{names.STALENESS_FAILURES} 2
# TYPE {names.TRAIN_STEP} gauge
{names.TRAIN_STEP} 17
# TYPE {names.WEIGHT_VERSION} gauge
{names.WEIGHT_VERSION} 17
# TYPE {names.WEIGHT_VERSION_INFO} gauge
{names.WEIGHT_VERSION_INFO}{{version="v17"}} 1
"""


def test_parse_staleness_and_export_per_job() -> None:
    s = parse_staleness(RUNTIME_METRICS, "t")
    assert (s.version_span_mean, s.version_span_max, s.version_span_min) == (1.5, 3.0, 1.0)
    assert s.dropped_groups == 5
    assert s.dropped_groups_by_reason["stale_version"] == 4
    assert (s.staleness_failures, s.step, s.weight_version) == (2, 17, "v17")
    plan = decide_for(
        make_job(),
        status=AsyncRLJobStatus(phase=JobPhase.RUNNING),
        pods=running_pods(),
        scrape=ScrapeResult(url="http://x/metrics", staleness=s),
    )
    assert plan.status.staleness == s
    assert condition(plan, "MetricsAvailable")[0] == "True"
    metrics = OperatorMetrics()
    metrics.jobs.update("ns", "job-a", plan.status)
    text = generate_latest(metrics.registry).decode()
    assert (
        f'{names.JOB_STALENESS_VERSION_SPAN_MAX}{{dressage_job="job-a",namespace="ns"}} 3.0' in text
    )
    by_reason = 'dressage_job="job-a",namespace="ns",reason="stale_version"'
    assert f"{names.JOB_DROPPED_GROUPS}{{{by_reason}}} 4.0" in text
    assert f'{names.JOB_STALENESS_FAILURES}{{dressage_job="job-a",namespace="ns"}} 2.0' in text
    metrics.jobs.remove("ns", "job-a")
    assert "job-a" not in generate_latest(metrics.registry).decode()


def test_version_lag_reaches_the_status_and_the_per_job_metrics() -> None:
    """The lag figures the run exports are read into `status.staleness` (the `Lag Max`
    column's `versionLagMax`) and exported per job; before the first step they are unset."""
    text = RUNTIME_METRICS + "".join(
        f"# TYPE {name} gauge\n{name} {value}\n"
        for name, value in (
            (names.STALENESS_VERSION_LAG_MEAN, 0.75),
            (names.STALENESS_VERSION_LAG_MAX, 2),
            (names.STALENESS_VERSION_LAG_TOKEN_MEAN, 0.5),
        )
    )
    s = parse_staleness(text, "t")
    assert (s.version_lag_mean, s.version_lag_max, s.version_lag_token_mean) == (0.75, 2.0, 0.5)
    shown = AsyncRLJobStatus(staleness=s).model_dump(by_alias=True)["staleness"]
    assert (shown["versionLagMax"], shown["versionLagMean"]) == (2.0, 0.75)
    assert parse_staleness(RUNTIME_METRICS, "t").version_lag_max is None
    metrics = OperatorMetrics()
    metrics.jobs.update("ns", "job-a", AsyncRLJobStatus(phase=JobPhase.RUNNING, staleness=s))
    exported = generate_latest(metrics.registry).decode()
    assert (
        f'{names.JOB_STALENESS_VERSION_LAG_MAX}{{dressage_job="job-a",namespace="ns"}} 2.0'
        in exported
    )
    assert (
        f'{names.JOB_STALENESS_VERSION_LAG_MEAN}{{dressage_job="job-a",namespace="ns"}} 0.75'
        in exported
    )
