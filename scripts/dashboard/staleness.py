"""The Staleness row: version span and lag per job, the operator's span against its limit,
and what the staleness controls drop, refuse and retry."""

from __future__ import annotations

from dashboard.layout import JL, JOB, POD, J, Layout, quantile, rate
from dressage import metrics as m


def add(d: Layout) -> None:
    """Version span and lag, drops, failures, retries, refusals, segment spans."""
    d.row("Staleness")
    d.timeseries(
        "Version span per job (mean / max / min)",
        "staleness/version_span_mean, _max and _min of the trajectories in the latest trainer "
        "batch: how many weight versions one trajectory spans.",
        [
            (f"max by ({J}) ({m.STALENESS_VERSION_SPAN_MEAN}{{{POD}}})", f"{JL} mean"),
            (f"max by ({J}) ({m.STALENESS_VERSION_SPAN_MAX}{{{POD}}})", f"{JL} max"),
            (f"min by ({J}) ({m.STALENESS_VERSION_SPAN_MIN}{{{POD}}})", f"{JL} min"),
        ],
        decimals=2,
    )
    d.timeseries(
        "Version lag per job (mean / token mean / max / at admission)",
        "staleness/version_lag_*: how many weight versions behind the trainer the samples of "
        "the latest batch were (the trainer's version minus the trajectory's, in observed "
        "order), per sample and per trainable token; and the largest lag admission projected "
        "for the groups started since (below keepVersions while admission control acts).",
        [
            (f"max by ({J}) ({m.STALENESS_VERSION_LAG_MEAN}{{{POD}}})", f"{JL} mean"),
            (
                f"max by ({J}) ({m.STALENESS_VERSION_LAG_TOKEN_MEAN}{{{POD}}})",
                f"{JL} token mean",
            ),
            (f"max by ({J}) ({m.STALENESS_VERSION_LAG_MAX}{{{POD}}})", f"{JL} max"),
            (
                f"max by ({J}) ({m.STALENESS_ADMISSION_LAG_MAX}{{{POD}}})",
                f"{JL} admission max",
            ),
        ],
        decimals=2,
    )
    d.timeseries(
        "Max version span vs limit, max lag (operator)",
        "The operator's per-job max version span against the job's limit "
        "(maxPartialRolloutPreempts + 1; absent when the partial-rollout control is off), "
        "and its max version lag.",
        [
            (f"max by ({J}) ({m.JOB_STALENESS_VERSION_SPAN_MAX}{{{JOB}}})", f"{JL} max span"),
            (f"max by ({J}) ({m.JOB_MAX_VERSION_SPAN_LIMIT}{{{JOB}}})", f"{JL} limit"),
            (f"max by ({J}) ({m.JOB_STALENESS_VERSION_LAG_MAX}{{{JOB}}})", f"{JL} max lag"),
        ],
    )
    d.timeseries(
        "Dropped groups / s by reason",
        "GRPO groups dropped whole by the staleness filter or after exhausting retries.",
        [(rate(m.DROPPED_GROUPS, POD, f"{J}, reason"), f"{JL} {{{{reason}}}}")],
        unit="ops",
        width=8,
    )
    d.timeseries(
        "Staleness failures / s",
        "Prompt-group attempts the proxy's staleness controls refused, one per failed "
        "attempt: the partial-rollout span limit (HTTP 502 partial_rollout_staleness_exceeded) "
        "or, without partial rollout, a trajectory whose version changed (HTTP 409 "
        "version_changed_without_partial_rollout); by job.",
        [(rate(m.STALENESS_FAILURES, POD, J), f"{JL}")],
        unit="ops",
        width=8,
    )
    d.timeseries(
        "Rollout retries / s",
        "Prompt-group retries after a failed group (bounded by rollout.maxRetries).",
        [(rate(m.ROLLOUT_RETRIES, POD, J), f"{JL}")],
        unit="ops",
        width=8,
    )
    d.timeseries(
        "Proxy refusals / s by reason",
        "Requests the proxy refused, e.g. partial_rollout_staleness_exceeded.",
        [(rate(m.PROXY_REFUSALS, POD, f"{J}, reason"), f"{JL} {{{{reason}}}}")],
        unit="ops",
    )
    d.timeseries(
        "Segment version span (p50 / p99)",
        "Version spans of the segments the proxy finished.",
        [
            (quantile(0.5, m.PROXY_VERSION_SPAN, POD, J), f"{JL} p50"),
            (quantile(0.99, m.PROXY_VERSION_SPAN, POD, J), f"{JL} p99"),
        ],
    )
