"""The time-to-quality benchmark's pure parts: one run's held-out curve and figures from its
evaluations and step history, the time to a threshold (interpolated), the pass@1 a run holds at
a wall-clock budget, the per-setting figures with 90 % bootstrap intervals across seeds, the
Markdown block and the plot, all from the results JSON alone (`benchmarks/time_to_quality.py
--render PATH`), so the page, the plot and the JSON carry the same figures.

Intervals are `_stress_report.bootstrap_interval`'s (percentile bootstrap of the mean over
seeds, widened to hold the mean). A setting's own figure is bootstrapped over its seeds; a
difference or a ratio against sync is paired by seed (the same training seed, run next to
each other in time, so at about the same machine load) and the per-seed differences or ratios
are bootstrapped.

Definitions. A run's clock is the evaluation's `elapsed` (seconds from the start of training,
the evaluator's start, to the end of the evaluation of that version: the clock the run's own
`eval_pass_at_1_time.png` uses; engine startup is left out, evaluation time is in). Its final
pass@1 is the mean of its last `FINAL_EVALS` evaluations (one evaluation of 48 prompts is
noisy). The target is
`TARGET_OF_SYNC` x the mean over seeds of sync's final pass@1; a run reaches it at the first
evaluation whose pass@1 is at least the target, the time interpolated linearly between that
evaluation and the one before it. A run that never reaches it counts, censored, as reaching it
at its last evaluation (a lower bound, favouring no setting that fails). The pass@1 at a budget
is that of the run's latest evaluation at or before it: the version a user stopping the run
then would hold (a run that ended sooner holds its final version).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _stress_report import bootstrap_interval

FINAL_EVALS = 2
TARGET_OF_SYNC = 0.95
GOAL_RATIO = 0.6
"""The headline goal: auto reaches sync's final held-out quality in at most 0.6x its wall-clock."""
REGIME_LAG = 4
"""The mean version lag the uncontrolled async setting is meant to train at, at least."""
LAG_MEAN = "staleness/version_lag_mean"
LAG_MAX = "staleness/version_lag_max"


def curve(evaluations: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """(step, elapsed, pass@1) of each evaluation, by step."""
    points = [
        {
            "step": float(e["step"]),
            "elapsed": float(e["elapsed"]),
            "pass1": float(e["pass_at"]["1"]),
        }
        for e in evaluations
    ]
    return sorted(points, key=lambda p: p["step"])


def time_to(
    points: Sequence[dict[str, float]], target: float, axis: str = "elapsed"
) -> float | None:
    """Where on `axis` ("elapsed" or "step") the curve first reaches `target`, interpolated
    linearly between the first evaluation at or above it and the one before; None if never."""
    for i, p in enumerate(points):
        if p["pass1"] >= target:
            if i == 0:
                return p[axis]
            q = points[i - 1]
            share = (target - q["pass1"]) / (p["pass1"] - q["pass1"])
            return q[axis] + share * (p[axis] - q[axis])
    return None


def value_at(points: Sequence[dict[str, float]], seconds: float) -> float | None:
    """pass@1 of the latest evaluation at or before `seconds`; None before the first."""
    held = [p["pass1"] for p in points if p["elapsed"] <= seconds]
    return held[-1] if held else None


def seed_figures(
    evaluations: Sequence[dict[str, Any]], history: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """One run's curve, final pass@1, wall-clock and version lag (the lag of its trained
    samples: the mean of the steps' `staleness/version_lag_mean`, and the largest lag)."""
    points = curve(evaluations)
    finals = [p["pass1"] for p in points[-FINAL_EVALS:]]
    lags = [float(h[LAG_MEAN]) for h in history if LAG_MEAN in h]
    lag_max = [float(h[LAG_MAX]) for h in history if LAG_MAX in h]
    return {
        "steps": len(history),
        "curve": points,
        "evaluations": len(points),
        "initial_pass1": points[0]["pass1"] if points else None,
        "final_pass1": statistics.fmean(finals) if finals else None,
        "best_pass1": max((p["pass1"] for p in points), default=None),
        "wall_seconds": points[-1]["elapsed"] if points else None,
        "lag_mean": statistics.fmean(lags) if lags else None,
        "lag_max": max(lag_max, default=None),
        "dropped_groups": sum(sum(h.get("dropped_groups", {}).values()) for h in history),
    }


def _interval(values: Sequence[float]) -> dict[str, Any] | None:
    if not values:
        return None
    point, low, high = bootstrap_interval(values)
    return {"mean": point, "low": low, "high": high, "per_seed": list(values)}


def _paired(
    seeds: Sequence[dict[str, Any]],
    sync: Sequence[dict[str, Any]],
    key: str,
    *,
    ratio: bool = False,
) -> list[float]:
    base = {s["seed"]: s[key] for s in sync if s.get(key) is not None}
    out = []
    for s in seeds:
        if s.get(key) is None or s["seed"] not in base:
            continue
        if ratio:
            if base[s["seed"]] > 0:
                out.append(s[key] / base[s["seed"]])
        else:
            out.append(s[key] - base[s["seed"]])
    return out


def target_of(results: dict[str, Any]) -> float | None:
    sync = results["settings"][0]["seeds"]
    finals = [s["final_pass1"] for s in sync if s.get("final_pass1") is not None]
    return TARGET_OF_SYNC * statistics.fmean(finals) if finals else None


def budget_of(results: dict[str, Any]) -> float | None:
    """The wall-clock budget: `budget_seconds` if the run set one, else `GOAL_RATIO` x the mean
    wall-clock of sync's runs."""
    if results.get("budget_seconds"):
        return float(results["budget_seconds"])
    walls = [s["wall_seconds"] for s in results["settings"][0]["seeds"] if s.get("wall_seconds")]
    return GOAL_RATIO * statistics.fmean(walls) if walls else None


def build_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per setting (the first is sync): per-seed time to the target and pass@1 at the
    budget, then every figure with its interval over seeds, and against sync."""
    target, budget = target_of(results), budget_of(results)
    sync_key = results["settings"][0]["key"]
    rows = []
    enriched: dict[str, list[dict[str, Any]]] = {}
    for setting in results["settings"]:
        seeds = []
        for s in setting["seeds"]:
            points = s.get("curve") or []
            reached = time_to(points, target) if target is not None else None
            seeds.append(
                {
                    **s,
                    "reached": reached is not None,
                    "seconds_to_target": reached if reached is not None else s.get("wall_seconds"),
                    "steps_to_target": time_to(points, target, "step") if target else None,
                    "pass1_at_budget": value_at(points, budget) if budget is not None else None,
                }
            )
        enriched[setting["key"]] = seeds
    sync = enriched[sync_key]
    for setting in results["settings"]:
        seeds = enriched[setting["key"]]
        against = setting["key"] != sync_key

        def own(key: str, seeds: list[dict[str, Any]] = seeds) -> dict[str, Any] | None:
            return _interval([float(s[key]) for s in seeds if s.get(key) is not None])

        rows.append(
            {
                "key": setting["key"],
                "label": setting["label"],
                "seeds": len(seeds),
                "reached": sum(1 for s in seeds if s["reached"]),
                "seconds_to_target": own("seconds_to_target"),
                "pass1_at_budget": own("pass1_at_budget"),
                "final_pass1": own("final_pass1"),
                "wall_seconds": own("wall_seconds"),
                "lag_mean": own("lag_mean"),
                "lag_max": max(
                    (s["lag_max"] for s in seeds if s.get("lag_max") is not None), default=None
                ),
                "time_ratio_vs_sync": _interval(
                    _paired(seeds, sync, "seconds_to_target", ratio=True)
                )
                if against
                else None,
                "final_diff_vs_sync": _interval(_paired(seeds, sync, "final_pass1"))
                if against
                else None,
                "budget_diff_vs_sync": _interval(_paired(seeds, sync, "pass1_at_budget"))
                if against
                else None,
            }
        )
    return rows


def goal(rows: list[dict[str, Any]], key: str = "auto") -> bool | None:
    """The headline goal for `key`: to sync's final quality in at most `GOAL_RATIO` x sync's
    wall-clock (the ratio's mean), with a final-quality difference whose interval reaches 0."""
    row = next((r for r in rows if r["key"] == key), None)
    if row is None or row["time_ratio_vs_sync"] is None or row["final_diff_vs_sync"] is None:
        return None
    return bool(
        row["time_ratio_vs_sync"]["mean"] <= GOAL_RATIO and row["final_diff_vs_sync"]["high"] >= 0
    )


def _ci(entry: dict[str, Any] | None, digits: int, *, signed: bool = False) -> str:
    if entry is None:
        return "-"
    f = f"+.{digits}f" if signed else f".{digits}f"
    return f"{entry['mean']:{f}} [{entry['low']:{f}}, {entry['high']:{f}}]"


def render_markdown(results: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The figures table and a sentence on what uncontrolled async does, as Markdown."""
    loads = results.get("load_average") or {}
    target, budget = target_of(results), budget_of(results)
    tag = " --quick" if results.get("quick") else ""
    lines = [
        f"`python benchmarks/time_to_quality.py{tag}` ({results.get('date', '?')}, revision "
        f"`{results.get('revision', '?')}`): `{results['job']}`, {results['steps']} steps x "
        f"{results['seeds']} seed(s) x {len(rows)} settings, seeds interleaved, evaluation every "
        f"{results['every_steps']} steps on the same {results['prompts']} held-out prompts; "
        f"{results.get('wall_seconds', 0) / 60:.0f} min, load average "
        f"{_ci_load(loads)} on 2 cores. Sync placement: `{results.get('sync_placement')}`. "
        f"Target: {TARGET_OF_SYNC:.0%} of sync's final pass@1 = "
        f"{'-' if target is None else f'{target:.3f}'}; budget "
        f"{'-' if budget is None else f'{budget:.0f}'} s of wall-clock.",
        "",
        "Mean over seeds [90 % bootstrap interval]; ratios and differences are against sync, "
        "paired by seed.",
        "",
        "| setting | reached | s to target | x sync's time | pass@1 at budget | vs sync "
        "| final pass@1 | vs sync | wall s | lag mean | lag max |",
        "| --- | ---: | --- | --- | --- | --- | --- | --- | --- | --- | ---: |",
    ]
    for r in rows:
        lag_max = "-" if r["lag_max"] is None else f"{r['lag_max']:.0f}"
        lines.append(
            f"| {r['label']} | {r['reached']}/{r['seeds']} | {_ci(r['seconds_to_target'], 0)} | "
            f"{_ci(r['time_ratio_vs_sync'], 2)} | {_ci(r['pass1_at_budget'], 3)} | "
            f"{_ci(r['budget_diff_vs_sync'], 3, signed=True)} | {_ci(r['final_pass1'], 3)} | "
            f"{_ci(r['final_diff_vs_sync'], 3, signed=True)} | {_ci(r['wall_seconds'], 0)} | "
            f"{_ci(r['lag_mean'], 2)} | {lag_max} |"
        )
    uncontrolled = next((r for r in rows if r["key"] == "async"), None)
    if uncontrolled is not None and uncontrolled["final_diff_vs_sync"] is not None:
        lines += [
            "",
            f"Uncontrolled async (mean lag {_ci(uncontrolled['lag_mean'], 2)} versions): final "
            f"pass@1 {_ci(uncontrolled['final_diff_vs_sync'], 3, signed=True)} against sync, "
            f"{_ci(uncontrolled['budget_diff_vs_sync'], 3, signed=True)} at the budget.",
        ]
        lag = uncontrolled["lag_mean"]
        if lag is not None and lag["mean"] < REGIME_LAG:
            lines[-1] += (
                f" Its mean lag is below the {REGIME_LAG} versions the comparison is meant for: "
                "the figure understates what uncontrolled staleness costs."
            )
    met = goal(rows)
    if met is not None:
        lines += [
            "",
            f"Goal (auto to sync's final quality in at most {GOAL_RATIO}x its wall-clock, final "
            f"difference interval reaching 0): {'met' if met else 'not met'}.",
        ]
    return "\n".join(lines) + "\n"


def _ci_load(loads: dict[str, Any]) -> str:
    low, high = loads.get("min"), loads.get("max")
    return "-" if low is None or high is None else f"{low:.1f}-{high:.1f}"


def bands(
    curves: Sequence[Sequence[dict[str, float]]], axis: str, grid: int = 60
) -> tuple[list[float], list[float], list[float], list[float]]:
    """x, mean, min, max of pass@1 over the runs. By "step": at each evaluated step (every run
    evaluates the same steps). By "elapsed": on an even grid of seconds, each run holding its
    latest evaluation, over the runs that had not ended by then."""
    if axis == "step":
        steps = sorted({p["step"] for c in curves for p in c})
        xs, values = [], []
        for x in steps:
            at = [p["pass1"] for c in curves for p in c if p["step"] == x]
            xs.append(x)
            values.append(at)
    else:
        end = max((c[-1]["elapsed"] for c in curves if c), default=0.0)
        xs, values = [], []
        for i in range(grid + 1):
            t = end * i / grid
            at = [
                v
                for c in curves
                if c and t <= c[-1]["elapsed"]
                for v in [value_at(c, t)]
                if v is not None
            ]
            if at:
                xs.append(t)
                values.append(at)
    return (
        xs,
        [statistics.fmean(v) for v in values],
        [min(v) for v in values],
        [max(v) for v in values],
    )


COLOURS = ("#888", "#c33", "#2a7", "#27c")


def plot_results(results: dict[str, Any], path: Path) -> None:
    """Held-out pass@1 against wall-clock and against steps, per setting the mean over seeds
    with the seeds' min-max band; the target and the budget dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target, budget = target_of(results), budget_of(results)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for setting, colour in zip(results["settings"], COLOURS, strict=False):
        curves = [s.get("curve") or [] for s in setting["seeds"]]
        for ax, axis in zip(axes, ("elapsed", "step"), strict=True):
            xs, mean, low, high = bands(curves, axis)
            ax.plot(xs, mean, color=colour, label=setting["label"])
            ax.fill_between(xs, low, high, color=colour, alpha=0.2)
    for ax, label in zip(axes, ("wall-clock seconds since training started", "step"), strict=True):
        if target is not None:
            ax.axhline(target, color="#333", lw=0.8, ls="--")
        ax.set_xlabel(label)
        ax.set_ylabel("held-out pass@1")
        ax.legend(fontsize=7, loc="best")
    if budget is not None:
        axes[0].axvline(budget, color="#333", lw=0.8, ls=":")
    fig.suptitle(
        f"time to quality: {results['seeds']} seed(s), mean and min-max band; dashed: "
        f"{TARGET_OF_SYNC:.0%} of sync's final pass@1, dotted: the budget",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


BEGIN = (
    "<!-- time to quality benchmark: generated by benchmarks/time_to_quality.py, do not edit -->"
)
END = "<!-- end of time to quality benchmark -->"
