"""The held-out evaluation row: pass@1 of each evaluated weight version, and the job's latest
and best as the operator keeps them in `status.evaluation`."""

from __future__ import annotations

from dashboard.layout import JL, POD, J, Layout
from dressage import metrics as m


def add(d: Layout) -> None:
    """Held-out evaluation (jobs with `spec.evaluation`; no series otherwise)."""
    d.row("Held-out evaluation")
    d.timeseries(
        "Held-out pass@1: latest and best",
        "pass@1 on the held-out prompts of the job's latest evaluated weight version, and the "
        "best it reached (status.evaluation, kept by the operator when the job no longer "
        "exports that version). The alert DressageEvalBelowBest fires when the latest stays "
        "well below the best.",
        [
            (f"max by ({J}) ({m.JOB_EVAL_LATEST_PASS_AT_1}{{{POD}}})", f"{JL} latest"),
            (f"max by ({J}) ({m.JOB_EVAL_BEST_PASS_AT_1}{{{POD}}})", f"{JL} best"),
        ],
        unit="percentunit",
        width=8,
    )
    d.timeseries(
        "Held-out pass@1 by version",
        "pass@1 of each evaluated weight version, as trainer rank 0 exports it (the latest few "
        "versions and the best one at any time): one series per version.",
        [
            (
                f'max by ({J}, version) ({m.EVAL_PASS_AT_K}{{{POD}, k="1"}})',
                f"{JL} {{{{version}}}}",
            )
        ],
        unit="percentunit",
        width=8,
    )
    d.timeseries(
        "Held-out reward by version",
        "Mean held-out reward of each evaluated weight version (the task's reward on the "
        "held-out prompts).",
        [(f"max by ({J}, version) ({m.EVAL_REWARD_MEAN}{{{POD}}})", f"{JL} {{{{version}}}}")],
        decimals=3,
        width=8,
    )
