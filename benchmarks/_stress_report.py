"""The staleness stress benchmark's pure parts: one run's figures from its step history, the
bootstrap intervals of a control's differences against the baseline, the table, the Markdown
block and the plot, all from the results JSON alone (`benchmarks/staleness_stress.py --render
PATH`), so the page, the plot and the JSON carry the same figures.

Intervals. Runs are paired by seed (the same training seed, run next to each other in time, so
at about the same machine load): for a figure, the per-seed differences control - baseline are
resampled with replacement and the 90 % interval is the 5th to 95th percentile of the
resampled means (a percentile bootstrap). With few seeds a skewed sample can put the point
estimate (the mean difference) just outside that range; the interval is then widened to hold
it, so a reported interval always contains its estimate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

SMOOTHING = 3
"""Steps in the trailing reward mean compared against the threshold (one step is noisy)."""
FINAL_WINDOW = 5
"""Last steps averaged into the final reward."""
LEVEL = 0.9
"""Coverage of the bootstrap intervals."""
RESAMPLES = 4000
COMPARED = (
    ("steps_to_threshold", "steps to threshold"),
    ("seconds_to_threshold", "seconds to threshold"),
    ("final_reward", "final reward"),
    ("logprob_diff_mean", "logprob diff"),
    ("mismatch_kl_k3_mean", "k3 KL"),
    ("lag_mean", "lag mean"),
)
"""Per-seed figures whose difference against the baseline gets an interval."""
LAG_MEAN = "staleness/version_lag_mean"
LAG_MAX = "staleness/version_lag_max"


def steps_to_threshold(rewards: Sequence[float], threshold: float) -> int | None:
    """First step whose trailing `SMOOTHING`-step mean reward reaches `threshold`, judged from
    the first full window on (the first step alone is the warm start's reward, not learning)."""
    for i in range(SMOOTHING - 1, len(rewards)):
        if sum(rewards[i + 1 - SMOOTHING : i + 1]) / SMOOTHING >= threshold:
            return i + 1
    return None


def _step_seconds(record: dict[str, Any]) -> float:
    return float(
        record.get("rollout_seconds", 0.0)
        + record.get("train_seconds", 0.0)
        + record.get("publish_seconds", 0.0)
    )


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _quantile(values: Sequence[float], q: float) -> float | None:
    return float(np.quantile(np.asarray(values, dtype=float), q)) if values else None


def seed_figures(history: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """One run's figures. A run that never reaches the threshold counts, for the comparisons,
    as reaching it one step after its last (`steps_to_threshold_censored`) and after all its
    step seconds: a lower bound, which favours no setting that fails to reach it.

    Lag: `lag_mean` is the mean of the steps' per-sample mean lag; `lag_p90` the 90th
    percentile of those step means; `lag_max` the largest lag of any trained sample."""
    rewards = [float(h.get("reward", 0.0)) for h in history]
    reached = steps_to_threshold(rewards, threshold)
    seconds = [_step_seconds(h) for h in history]
    censored = reached if reached is not None else len(history) + 1
    diffs = [float(h.get("train_rollout_logprob_abs_diff", 0.0)) for h in history]
    lags = [
        float(h["staleness/version_lag_mean"]) for h in history if "staleness/version_lag_mean" in h
    ]
    lag_max = [
        float(h["staleness/version_lag_max"]) for h in history if "staleness/version_lag_max" in h
    ]
    dropped: dict[str, int] = {}
    for h in history:
        for reason, n in h.get("dropped_groups", {}).items():
            dropped[reason] = dropped.get(reason, 0) + int(n)
    return {
        "steps": len(history),
        "steps_to_threshold": reached,
        "steps_to_threshold_censored": censored,
        "seconds_to_threshold": round(sum(seconds[:censored]), 2),
        "reached": reached is not None,
        "seconds_per_step": round(sum(seconds) / len(seconds), 3) if seconds else None,
        "final_reward": _mean(rewards[-FINAL_WINDOW:]),
        "logprob_diff_mean": _mean(diffs),
        "mismatch_kl_k3_mean": _mean(
            [float(h["mismatch_kl_k3"]) for h in history if "mismatch_kl_k3" in h]
        ),
        "lag_mean": _mean(lags),
        "lag_p90": _quantile(lags, 0.9),
        "lag_max": max(lag_max, default=None),
        "dropped_groups": sum(dropped.values()),
        "dropped_by_reason": dropped,
        "admissions_held": sum(int(h.get("admissions_held", 0)) for h in history),
        "staleness_failures": sum(int(h.get("staleness_failures", 0)) for h in history),
        "rewards": rewards,
        "logprob_diffs": diffs,
    }


def bootstrap_interval(
    differences: Sequence[float],
    *,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    rng_seed: int = 0,
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `differences` and its percentile-bootstrap interval at
    `level`, widened to hold the mean (see the module). Deterministic for a given `rng_seed`."""
    if not differences:
        raise ValueError("no differences to bootstrap")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    data = np.asarray(differences, dtype=float)
    point = float(data.mean())
    rng = np.random.default_rng(rng_seed)
    picks = rng.integers(0, len(data), size=(resamples, len(data)))
    means = data[picks].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = (float(x) for x in np.quantile(means, [tail, 1.0 - tail]))
    return point, min(low, point), max(high, point)


def paired(control: list[dict[str, Any]], baseline: list[dict[str, Any]], key: str) -> list[float]:
    """Per-seed differences control - baseline of figure `key`, over the seeds both have."""
    base: dict[int, float] = {s["seed"]: float(s[key]) for s in baseline if s.get(key) is not None}
    return [
        float(s[key]) - base[s["seed"]]
        for s in control
        if s.get(key) is not None and s["seed"] in base
    ]


def comparison(control: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, Any]:
    """A control's differences against the baseline: per figure the mean difference, its
    interval and whether the interval excludes zero; and whether its logprob diff is lower
    than the baseline's in every seed."""
    out: dict[str, Any] = {}
    for key, _ in COMPARED:
        field = "steps_to_threshold_censored" if key == "steps_to_threshold" else key
        diffs = paired(control, baseline, field)
        if not diffs:
            out[key] = None
            continue
        point, low, high = bootstrap_interval(diffs)
        out[key] = {
            "mean_difference": point,
            "low": low,
            "high": high,
            "excludes_zero": low > 0 or high < 0,
            "per_seed": diffs,
        }
    lp = paired(control, baseline, "logprob_diff_mean")
    out["logprob_diff_lower_every_seed"] = bool(lp) and all(d < 0 for d in lp)
    steps = out["steps_to_threshold"]
    out["claim_holds"] = bool(
        steps is not None and steps["high"] < 0 and out["logprob_diff_lower_every_seed"]
    )
    return out


def aggregate(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """A setting's figures over its seeds: medians of the per-seed figures, totals of counts."""

    def med(key: str) -> float | None:
        values = [float(s[key]) for s in seeds if s.get(key) is not None]
        return statistics.median(values) if values else None

    return {
        "seeds": len(seeds),
        "seeds_reaching_threshold": sum(1 for s in seeds if s["reached"]),
        "steps_to_threshold": [s["steps_to_threshold"] for s in seeds],
        "median_steps_to_threshold": med("steps_to_threshold_censored"),
        "median_seconds_to_threshold": med("seconds_to_threshold"),
        "seconds_per_step": med("seconds_per_step"),
        "final_reward": med("final_reward"),
        "logprob_diff_mean": med("logprob_diff_mean"),
        "mismatch_kl_k3_mean": med("mismatch_kl_k3_mean"),
        "lag_mean": med("lag_mean"),
        "lag_p90": med("lag_p90"),
        "lag_max": max(
            (float(s["lag_max"]) for s in seeds if s.get("lag_max") is not None), default=None
        ),
        "dropped_groups": sum(int(s["dropped_groups"]) for s in seeds),
        "admissions_held": sum(int(s["admissions_held"]) for s in seeds),
        "staleness_failures": sum(int(s["staleness_failures"]) for s in seeds),
        "runs_ok": sum(1 for s in seeds if s.get("status") == "ok"),
    }


def build_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per setting: its aggregate, and for a control its comparison with the
    baseline (the first setting)."""
    settings: list[dict[str, Any]] = results["settings"]
    if not settings:
        return []
    baseline = settings[0]["seeds"]
    rows = []
    for index, setting in enumerate(settings):
        rows.append(
            {
                "key": setting["key"],
                "label": setting["label"],
                "aggregate": aggregate(setting["seeds"]),
                "comparison": None if index == 0 else comparison(setting["seeds"], baseline),
            }
        )
    return rows


def _f(value: float | None, digits: int = 3) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:.{digits}f}"
    )


def _interval(entry: dict[str, Any] | None, digits: int) -> str:
    if entry is None:
        return "-"
    mark = " *" if entry["excludes_zero"] else ""
    return (
        f"{entry['mean_difference']:+.{digits}f} [{entry['low']:+.{digits}f}, "
        f"{entry['high']:+.{digits}f}]{mark}"
    )


def _reached(steps: list[int | None]) -> str:
    return "/".join("not" if s is None else str(s) for s in steps)


def render_markdown(results: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The figures table and the differences table, as Markdown."""
    loads = results.get("load_average") or {}
    lines = [
        f"`python benchmarks/staleness_stress.py{' --quick' if results.get('quick') else ''}`: "
        f"{results['steps']} steps x {results['seeds']} seeds x {len(rows)} settings, seeds "
        f"interleaved, {results.get('wall_seconds', 0) / 60:.0f} min, load average "
        f"{_f(loads.get('min'), 1)}-{_f(loads.get('max'), 1)} on 2 cores; threshold "
        f"{results['threshold']} ({SMOOTHING}-step trailing mean reward).",
        "",
        "| setting | steps to threshold (per seed) | median steps | median s to it | s/step "
        "| final reward | logprob diff | k3 KL | lag mean | lag p90 | lag max | drops | held "
        "| fails | ok |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: |",
    ]
    for row in rows:
        a = row["aggregate"]
        lines.append(
            f"| {row['label']} | {_reached(a['steps_to_threshold'])} | "
            f"{_f(a['median_steps_to_threshold'], 0)} | {_f(a['median_seconds_to_threshold'], 0)} "
            f"| {_f(a['seconds_per_step'], 2)} | {_f(a['final_reward'])} | "
            f"{_f(a['logprob_diff_mean'], 4)} | {_f(a['mismatch_kl_k3_mean'], 4)} | "
            f"{_f(a['lag_mean'], 2)} | {_f(a['lag_p90'], 2)} | {_f(a['lag_max'], 0)} | "
            f"{a['dropped_groups']} | {a['admissions_held']} | {a['staleness_failures']} | "
            f"{a['runs_ok']}/{a['seeds']} |"
        )
    lines += [
        "",
        "Differences against the baseline, control - baseline: mean over seeds [90 % bootstrap "
        'interval]; `*` marks an interval that excludes zero. "lower every seed": the '
        "control's logprob diff is below the baseline's in each seed; \"claim\": both that and "
        "fewer steps to the threshold with an interval below zero.",
        "",
        "| setting | " + " | ".join(name for _, name in COMPARED) + " | lower every seed | claim |",
        "| --- | " + " | ".join("---" for _ in COMPARED) + " | --- | --- |",
    ]
    digits = {
        "steps_to_threshold": 1,
        "seconds_to_threshold": 0,
        "final_reward": 3,
        "logprob_diff_mean": 4,
        "mismatch_kl_k3_mean": 4,
        "lag_mean": 2,
    }
    for row in rows[1:]:
        c = row["comparison"]
        cells = [_interval(c[key], digits[key]) for key, _ in COMPARED]
        lines.append(
            f"| {row['label']} | "
            + " | ".join(cells)
            + f" | {'yes' if c['logprob_diff_lower_every_seed'] else 'no'} | "
            f"{'holds' if c['claim_holds'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def _band(curves: list[list[float]]) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps, mean, min and max over seeds (over the seeds that reached each step)."""
    length = max((len(c) for c in curves), default=0)
    xs, mean, low, high = [], [], [], []
    for i in range(length):
        values = [c[i] for c in curves if i < len(c)]
        xs.append(i + 1)
        mean.append(statistics.fmean(values))
        low.append(min(values))
        high.append(max(values))
    return xs, mean, low, high


def plot_results(results: dict[str, Any], path: Path) -> None:
    """One row per control: reward and logprob diff against step, baseline against control,
    mean over seeds with the seeds' min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings: list[dict[str, Any]] = results["settings"]
    baseline, controls = settings[0], settings[1:]
    fig, axes = plt.subplots(
        max(1, len(controls)), 2, figsize=(11, 2.8 * max(1, len(controls))), squeeze=False
    )
    for row, control in enumerate(controls):
        for col, (field, label) in enumerate(
            (("rewards", "batch reward"), ("logprob_diffs", "logprob diff (train - rollout)"))
        ):
            ax = axes[row][col]
            for setting, color in ((baseline, "#888"), (control, "#2a7")):
                xs, mean, low, high = _band([s[field] for s in setting["seeds"]])
                ax.plot(xs, mean, color=color, label=setting["label"])
                ax.fill_between(xs, low, high, color=color, alpha=0.2)
            if field == "rewards":
                ax.axhline(results["threshold"], color="#c33", lw=0.8, ls="--")
            ax.set_ylabel(label, fontsize=8)
            ax.legend(fontsize=7, loc="best")
            if row == len(controls) - 1:
                ax.set_xlabel("step")
    fig.suptitle(
        f"staleness stress: {results['seeds']} seeds, mean and min-max band over seeds",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


BEGIN = (
    "<!-- staleness stress benchmark: generated by benchmarks/staleness_stress.py, do not edit -->"
)
END = "<!-- end of staleness stress benchmark -->"


def update_readme(readme: Path, block: str, *, begin: str = BEGIN, end: str = END) -> None:
    """Replace what stands between `begin` and `end` (by default this benchmark's markers) in
    `readme` with `block`, nothing else."""
    text = readme.read_text()
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{readme}: no {begin!r} ... {end!r} block")
    readme.write_text(text[: start + len(begin)] + "\n\n" + block + "\n" + text[stop:])
