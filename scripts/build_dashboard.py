"""Build the Grafana dashboard of the Helm chart from the metric names in `dressage.metrics`.

The dashboard JSON (`charts/dressage-operator/dashboards/dressage.json`) is generated, not
hand-edited: every query is written here with the metric-name constants, so a renamed metric
cannot silently leave a panel empty, and every declared step figure (`dressage.api.figures`)
that no hand-made panel shows gets a panel of its own in the "Every step figure" row.
`tests/chart/test_dashboard.py` regenerates it and fails on a difference. Run
`python scripts/build_dashboard.py` after changing a panel or a figure.

Label conventions the queries rely on:
- job pods are scraped by the chart's PodMonitor, which adds `dressage_job` (`m.JOB_LABEL`,
  from the pod label `dressage.io/job`) and `component`; Prometheus adds `namespace`, `pod`;
- the operator's per-job series carry `namespace` and `dressage_job` too, and its own
  `dressage_operator_*` health series none. Prometheus' `job` stays the scrape job's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dressage import metrics as m  # noqa: E402
from dressage.api.figures import FigureKind, StepFigures, figures_of  # noqa: E402

OUTPUT = ROOT / "charts" / "dressage-operator" / "dashboards" / "dressage.json"
UID = "dressage-overview"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"

# The job's label, its legend, and the selectors of job pods (PodMonitor labels) and of the
# operator's per-job series: the same label on both.
J = m.JOB_LABEL
JL = "{{" + J + "}}"
POD = f'namespace=~"$namespace", {J}=~"$job"'
JOB = POD

Target = tuple[str, str]
"""A query and its legend."""


def _rate(name: str, selector: str, by: str) -> str:
    return f"sum by ({by}) (rate({name}{{{selector}}}[{RATE}]))"


def _quantile(q: float, histogram: str, selector: str, by: str) -> str:
    return (
        f"histogram_quantile({q}, sum by ({by}, le) "
        f"(rate({histogram}_bucket{{{selector}}}[{RATE}])))"
    )


class _Layout:
    """Places panels left to right, row by row, on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self._next_id = 1
        self._x = 0
        self._y = 0
        self._row_height = 0

    def _id(self) -> int:
        panel_id = self._next_id
        self._next_id += 1
        return panel_id

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(
            {
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y},
                "id": self._id(),
                "panels": [],
                "title": title,
                "type": "row",
            }
        )
        self._y += 1

    def _newline(self) -> None:
        self._y += self._row_height
        self._x = 0
        self._row_height = 0

    def _place(self, width: int, height: int) -> dict[str, int]:
        if self._x + width > 24:
            self._newline()
        pos = {"h": height, "w": width, "x": self._x, "y": self._y}
        self._x += width
        self._row_height = max(self._row_height, height)
        return pos

    def timeseries(
        self,
        title: str,
        description: str,
        targets: list[Target],
        unit: str = "short",
        width: int = 12,
        height: int = 8,
        decimals: int | None = None,
    ) -> None:
        defaults: dict[str, Any] = {
            "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "spanNulls": False},
            "unit": unit,
        }
        if decimals is not None:
            defaults["decimals"] = decimals
        self.panels.append(
            {
                "datasource": DATASOURCE,
                "description": description,
                "fieldConfig": {"defaults": defaults, "overrides": []},
                "gridPos": self._place(width, height),
                "id": self._id(),
                "options": {
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"},
                },
                "targets": [
                    {
                        "datasource": DATASOURCE,
                        "expr": expr,
                        "legendFormat": legend,
                        "range": True,
                        "refId": chr(ord("A") + i),
                    }
                    for i, (expr, legend) in enumerate(targets)
                ],
                "title": title,
                "type": "timeseries",
            }
        )


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "allValue": ".*",
        "current": {},
        "datasource": DATASOURCE,
        "definition": query,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor"},
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "type": "query",
    }


def _figure_panels(d: _Layout, declaration: type[StepFigures]) -> None:
    """A panel for every declared step figure no panel above queries yet, so a new figure
    reaches the dashboard with its declaration: a gauge per job, a counter's rate per job, a
    by-reason counter's rate per job and reason."""
    queried = " ".join(t["expr"] for panel in d.panels for t in panel.get("targets", []))
    missing = [f for f in figures_of(declaration) if f.metric not in queried]
    if not missing:
        return
    d.row("Every step figure")
    for f in missing:
        if f.kind is FigureKind.GAUGE and f.label is not None:
            by = f"{J}, {f.label}"
            target = (f"avg by ({by}) ({f.metric}{{{POD}}})", f"{JL} {{{{{f.label}}}}}")
        elif f.kind is FigureKind.GAUGE:
            target = (f"avg by ({J}) ({f.metric}{{{POD}}})", f"{JL}")
        elif f.kind is FigureKind.COUNTER:
            target = (_rate(f.metric, POD, J), f"{JL}")
        else:
            target = (_rate(f.metric, POD, f"{J}, reason"), f"{JL} {{{{reason}}}}")
        per_second = "" if f.kind is FigureKind.GAUGE else " per second"
        d.timeseries(f"{f.key} ({f.unit}{per_second})", f"{f.help}.", [target], width=8)


def build(declaration: type[StepFigures] = StepFigures) -> dict[str, Any]:
    """The dashboard as a JSON-ready dict (for the figures of `declaration`)."""
    d = _Layout()

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
        [(_rate(m.DROPPED_GROUPS, POD, f"{J}, reason"), f"{JL} {{{{reason}}}}")],
        unit="ops",
        width=8,
    )
    d.timeseries(
        "Staleness failures / s",
        "Prompt-group attempts the proxy's staleness controls refused, one per failed "
        "attempt: the partial-rollout span limit (HTTP 502 partial_rollout_staleness_exceeded) "
        "or, without partial rollout, a trajectory whose version changed (HTTP 409 "
        "version_changed_without_partial_rollout); by job.",
        [(_rate(m.STALENESS_FAILURES, POD, J), f"{JL}")],
        unit="ops",
        width=8,
    )
    d.timeseries(
        "Rollout retries / s",
        "Prompt-group retries after a failed group (bounded by rollout.maxRetries).",
        [(_rate(m.ROLLOUT_RETRIES, POD, J), f"{JL}")],
        unit="ops",
        width=8,
    )
    d.timeseries(
        "Proxy refusals / s by reason",
        "Requests the proxy refused, e.g. partial_rollout_staleness_exceeded.",
        [(_rate(m.PROXY_REFUSALS, POD, f"{J}, reason"), f"{JL} {{{{reason}}}}")],
        unit="ops",
    )
    d.timeseries(
        "Segment version span (p50 / p99)",
        "Version spans of the segments the proxy finished.",
        [
            (_quantile(0.5, m.PROXY_VERSION_SPAN, POD, J), f"{JL} p50"),
            (_quantile(0.99, m.PROXY_VERSION_SPAN, POD, J), f"{JL} p99"),
        ],
    )

    d.row("Training")
    d.timeseries(
        "Reward (mean)",
        "Mean reward of the trained batch.",
        [(f"avg by ({J}) ({m.REWARD_MEAN}{{{POD}}})", f"{JL}")],
        decimals=3,
    )
    d.timeseries(
        "train_rollout_logprob_abs_diff",
        "Mean |trainer logprob - rollout logprob| of trained tokens: the train-inference gap "
        "that staleness control keeps small.",
        [(f"avg by ({J}) ({m.TRAIN_ROLLOUT_LOGPROB_ABS_DIFF}{{{POD}}})", f"{JL}")],
        decimals=4,
    )
    d.timeseries(
        "Weight version and train step",
        "Ordinal of the latest published weight version and the trainer's step.",
        [
            (f"max by ({J}) ({m.WEIGHT_VERSION}{{{POD}}})", f"{JL} weight version"),
            (f"max by ({J}) ({m.TRAIN_STEP}{{{POD}}})", f"{JL} train step"),
        ],
        decimals=0,
    )
    d.timeseries(
        "Completed groups and trained samples / s",
        "Rollout throughput against what reaches the trainer.",
        [
            (_rate(m.ROLLOUT_GROUPS_COMPLETED, POD, J), f"{JL} groups completed"),
            (_rate(m.TRAINED_SAMPLES, POD, J), f"{JL} samples trained"),
        ],
        unit="ops",
    )

    d.row("Off-policy correction and admission")
    d.timeseries(
        "Rollout/train mismatch KL (k1 / k3)",
        "mismatch_kl of the trained batch: k1 = mean(-log r) and k3 = mean(r - 1 - log r), "
        "r = exp(train logprob - rollout logprob) over trained tokens; k3 is never negative.",
        [
            (f"avg by ({J}) ({m.MISMATCH_KL_K1}{{{POD}}})", f"{JL} k1"),
            (f"avg by ({J}) ({m.MISMATCH_KL_K3}{{{POD}}})", f"{JL} k3"),
        ],
        decimals=4,
        width=8,
    )
    d.timeseries(
        "Tokens clipped / masked by the correction",
        "Fraction of trained tokens whose importance weight was clipped (TIS) or that were "
        "masked (token band, sequence mask); 0 while training.offPolicyCorrection is off.",
        [
            (
                f"avg by ({J}) ({m.OFF_POLICY_CLIPPED_FRACTION}{{{POD}}})",
                f"{JL} clipped",
            ),
            (
                f"avg by ({J}) ({m.OFF_POLICY_MASKED_FRACTION}{{{POD}}})",
                f"{JL} masked",
            ),
        ],
        unit="percentunit",
        width=8,
    )
    d.timeseries(
        "IS effective sample size",
        "(sum w)^2 / sum w^2 of the importance weights over trained tokens, as a fraction of "
        "the trained tokens: 1 when rollout and trainer agree, lower as they drift apart.",
        [(f"min by ({J}) ({m.IS_ESS_FRACTION}{{{POD}}})", f"{JL}")],
        unit="percentunit",
        width=8,
    )
    d.timeseries(
        "Admissions held / s",
        "Prompt groups whose start admission control held back because they could not have "
        "been trained inside the staleness window.",
        [(_rate(m.ROLLOUT_ADMISSIONS_HELD, POD, J), f"{JL}")],
        unit="ops",
    )
    d.timeseries(
        "Rollout time waiting for admission",
        "Seconds per second the rollout worker waited for admission: 0 never waits, 1 waits "
        "all the time (the trainer is the bottleneck).",
        [(_rate(m.ROLLOUT_ADMISSION_WAIT_SECONDS, POD, J), f"{JL}")],
        unit="percentunit",
    )

    d.row("MoE routing replay")
    d.timeseries(
        "Routing agreement and routed tokens",
        "MoE jobs with spec.rollout.routingReplay record or replay (no series otherwise). "
        "routing_agreement: share of the (token, MoE layer) pairs the rollout routed whose "
        "top-k expert set the trainer's own router picks too; low agreement is train/rollout "
        "mismatch coming back through the router, which replay removes from the loss. "
        "routed_token_fraction: share of the trained samples' tokens that carried the "
        "rollout's routes (the others are routed by the trainer's own router).",
        [
            (f"avg by ({J}) ({m.ROUTING_AGREEMENT}{{{POD}}})", f"{JL} agreement"),
            (
                f"avg by ({J}) ({m.ROUTED_TOKEN_FRACTION}{{{POD}}})",
                f"{JL} routed tokens",
            ),
        ],
        unit="percentunit",
        width=24,
    )

    d.row("Proxy and engines")
    d.timeseries(
        "Proxy latency and overhead (p50 / p99)",
        "Request duration at the proxy, and what it adds to each model turn beyond the "
        "engines' own time, by job.",
        [
            (
                _quantile(0.5, m.PROXY_REQUEST_DURATION, POD, J),
                f"{JL} p50",
            ),
            (
                _quantile(0.99, m.PROXY_REQUEST_DURATION, POD, J),
                f"{JL} p99",
            ),
            (
                _quantile(0.5, m.PROXY_GENERATION_OVERHEAD, POD, J),
                f"{JL} overhead p50",
            ),
            (
                _quantile(0.99, m.PROXY_GENERATION_OVERHEAD, POD, J),
                f"{JL} overhead p99",
            ),
        ],
        unit="s",
        width=8,
    )
    d.timeseries(
        "Proxy requests / s by code",
        "Requests through the proxy by HTTP status code.",
        [(_rate(m.PROXY_REQUESTS, POD, f"{J}, code"), f"{JL} {{{{code}}}}")],
        unit="reqps",
        width=8,
    )
    d.timeseries(
        "Active sessions and preempts / s",
        "Open trajectory sessions and generations preempted by a weight update.",
        [
            (f"sum by ({J}) ({m.PROXY_ACTIVE_SESSIONS}{{{POD}}})", f"{JL} sessions"),
            (_rate(m.PROXY_PREEMPTS, POD, J), f"{JL} preempts/s"),
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
        "Drained tokens moved / trained / lost",
        "Tokens a draining engine generated that the proxy kept in their turns (partial "
        "rollout) and moved to another engine, those the trainer then trained, and those lost "
        "as their turn then failed (by reason; the group is retried). Over a run moved = "
        "trained + lost, except for groups dropped or not trained yet.",
        [
            (_rate(m.PROXY_DRAINED_TOKENS, POD, J), f"{JL} moved"),
            (_rate(m.TRAINED_DRAINED_TOKENS, POD, J), f"{JL} trained"),
            (
                _rate(m.PROXY_DRAINED_TOKENS_LOST, POD, f"{J}, reason"),
                f"{JL} lost {{{{reason}}}}",
            ),
        ],
        unit="ops",
        width=24,
    )

    _figure_panels(d, declaration)

    d.row("Operator")
    d.timeseries(
        "Job phase",
        "The phase of each AsyncRLJob (1 while in that phase).",
        [(f"max by ({J}, phase) ({m.JOB_PHASE}{{{JOB}}}) == 1", f"{JL} {{{{phase}}}}")],
        decimals=0,
        width=8,
    )
    d.timeseries(
        "Job restarts (increase)",
        "Trainer gang restarts per job over the rate interval.",
        [
            (
                f"sum by ({J}) (increase({m.JOB_RESTARTS}{{{JOB}}}[{RATE}]))",
                f"{JL}",
            )
        ],
        width=8,
    )
    d.timeseries(
        "Reconciles / s by result",
        "Operator reconcile outcomes (ok, error, retry).",
        [
            (
                f"sum by (result) (rate({m.OPERATOR_RECONCILE}[{RATE}]))",
                "{{result}}",
            ),
            (
                f"sum(rate({m.OPERATOR_RECONCILE_ERRORS}[{RATE}]))",
                "errors",
            ),
        ],
        unit="ops",
        width=8,
    )
    d.timeseries(
        "Reconcile duration (p50 / p99)",
        "Time the operator spends per reconcile.",
        [
            (
                f"histogram_quantile(0.5, sum by (le) "
                f"(rate({m.OPERATOR_RECONCILE_DURATION}_bucket[{RATE}])))",
                "p50",
            ),
            (
                f"histogram_quantile(0.99, sum by (le) "
                f"(rate({m.OPERATOR_RECONCILE_DURATION}_bucket[{RATE}])))",
                "p99",
            ),
        ],
        unit="s",
        width=24,
    )

    return {
        "annotations": {"list": []},
        "description": "Dressage async RL jobs: staleness control, training progress, proxy "
        "and engines, operator health.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "links": [],
        "panels": d.panels,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["dressage", "rl"],
        "templating": {
            "list": [
                {
                    "current": {},
                    "hide": 0,
                    "includeAll": False,
                    "label": "Data source",
                    "multi": False,
                    "name": "datasource",
                    "options": [],
                    "query": "prometheus",
                    "refresh": 1,
                    "regex": "",
                    "type": "datasource",
                },
                _variable("namespace", "Namespace", f"label_values({m.TRAIN_STEP}, namespace)"),
                _variable(
                    "job",
                    "Job",
                    f'label_values({m.TRAIN_STEP}{{namespace=~"$namespace"}}, {J})',
                ),
            ]
        },
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": "Dressage",
        "uid": UID,
        "version": 1,
    }


def render() -> str:
    """The dashboard file's exact text."""
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
