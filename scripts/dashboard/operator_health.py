"""The Operator row: each job's phase and restarts, and the operator's reconcile health."""

from __future__ import annotations

from dashboard.layout import JL, JOB, RATE, J, Layout
from dressage import metrics as m


def add(d: Layout) -> None:
    """Job phase, restarts, reconciles and their duration."""
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
