"""The serving rows: the proxy and its engines as the proxy sees them, and the engine fleet
with its autoscaler."""

from __future__ import annotations

from dashboard.layout import JL, JOB, POD, RATE, J, Layout, quantile, rate
from dressage import metrics as m
from dressage.api.figures import figure


def add(d: Layout) -> None:
    """Proxy and engines, Engine fleet and autoscaling."""
    d.row("Proxy and engines")
    d.timeseries(
        "Proxy latency and overhead (p50 / p99)",
        "Request duration at the proxy, and what it adds to each model turn beyond the "
        "engines' own time, by job.",
        [
            (
                quantile(0.5, m.PROXY_REQUEST_DURATION, POD, J),
                f"{JL} p50",
            ),
            (
                quantile(0.99, m.PROXY_REQUEST_DURATION, POD, J),
                f"{JL} p99",
            ),
            (
                quantile(0.5, m.PROXY_GENERATION_OVERHEAD, POD, J),
                f"{JL} overhead p50",
            ),
            (
                quantile(0.99, m.PROXY_GENERATION_OVERHEAD, POD, J),
                f"{JL} overhead p99",
            ),
        ],
        unit="s",
        width=8,
    )
    d.timeseries(
        "Proxy requests / s by code",
        "Requests through the proxy by HTTP status code.",
        [(rate(m.PROXY_REQUESTS, POD, f"{J}, code"), f"{JL} {{{{code}}}}")],
        unit="reqps",
        width=8,
    )
    d.timeseries(
        "Active sessions and preempts / s",
        "Open trajectory sessions and generations preempted by a weight update.",
        [
            (f"sum by ({J}) ({m.PROXY_ACTIVE_SESSIONS}{{{POD}}})", f"{JL} sessions"),
            (rate(m.PROXY_PREEMPTS, POD, J), f"{JL} preempts/s"),
        ],
        width=8,
    )
    d.timeseries(
        "Engine health",
        "1 when an engine answers the proxy's health check, 0 otherwise.",
        [
            (
                f"min by ({J}, engine) ({m.PROXY_ENGINE_HEALTHY}{{{POD}}})",
                f"{JL} {{{{engine}}}}",
            )
        ],
        width=24,
        decimals=0,
    )

    d.row("Engine fleet and autoscaling")
    d.timeseries(
        "Engines (desired / ready)",
        "The engines each job asks for (spec.inference.replicas: set by hand, kubectl scale, "
        "an HPA or the built-in autoscaler) and those ready.",
        [(f"max by ({J}, state) ({m.JOB_ENGINES}{{{JOB}}})", f"{JL} {{{{state}}}}")],
        decimals=0,
        width=8,
    )
    d.timeseries(
        "Autoscaler signals",
        "Over the trainer steps of the autoscaler's last interval: the fraction of step time "
        "the trainer waited for batches (scale up above scaleUpWaitFraction) and the fraction "
        "admission control held rollout back (scale down above scaleDownHeldFraction).",
        [
            (f"max by ({J}) ({m.JOB_TRAINER_WAIT_FRACTION}{{{JOB}}})", f"{JL} trainer waits"),
            (
                f"max by ({J}) ({m.JOB_ADMISSION_HELD_FRACTION}{{{JOB}}})",
                f"{JL} admission holds",
            ),
        ],
        unit="percentunit",
        width=8,
    )
    d.timeseries(
        "Autoscaler decisions",
        "The engine count of the autoscaler's last decision, and its changes by direction "
        "over the rate interval (each posts an EnginesScaled Event on the job).",
        [
            (f"max by ({J}) ({m.JOB_AUTOSCALER_DESIRED_ENGINES}{{{JOB}}})", f"{JL} desired"),
            (
                f"sum by ({J}, direction) (increase({m.JOB_ENGINE_SCALE_EVENTS}{{{JOB}}}[{RATE}]))",
                f"{JL} {{{{direction}}}}",
            ),
        ],
        width=8,
    )
    d.timeseries(
        "Staleness budget: lag against the budget, engines wanted",
        "Jobs in staleness.mode auto: the largest version lag of the latest step's samples "
        "against the budget's maxLagVersions, and the engines the job's controller wants over "
        "those serving (above 1 the trainer waits with the depth at its bound: the autoscaler "
        "adds engines while the lag is under the budget; below 1 the budget holds rollout "
        "back: it removes them). Each change posts a StalenessBudgetScaleUp or "
        "StalenessBudgetScaleDown Event on the job.",
        [
            (f"max by ({J}) ({m.JOB_STALENESS_VERSION_LAG_MAX}{{{JOB}}})", f"{JL} max lag"),
            (f"max by ({J}) ({figure('budget_max_lag').job_metric}{{{JOB}}})", f"{JL} budget"),
            (
                f"max by ({J}) ({figure('budget_engine_ratio').job_metric}{{{JOB}}})",
                f"{JL} engines wanted / serving",
            ),
        ],
        decimals=2,
        width=24,
    )
    d.timeseries(
        "Drained tokens moved / trained / lost",
        "Tokens a draining engine generated that the proxy kept in their turns (partial "
        "rollout) and moved to another engine, those the trainer then trained, and those lost "
        "as their turn then failed (by reason; the group is retried). Over a run moved = "
        "trained + lost, except for groups dropped or not trained yet.",
        [
            (rate(m.PROXY_DRAINED_TOKENS, POD, J), f"{JL} moved"),
            (rate(m.TRAINED_DRAINED_TOKENS, POD, J), f"{JL} trained"),
            (
                rate(m.PROXY_DRAINED_TOKENS_LOST, POD, f"{J}, reason"),
                f"{JL} lost {{{{reason}}}}",
            ),
        ],
        unit="ops",
        width=24,
    )
