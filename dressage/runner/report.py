"""Per-step history and the end-of-run report (JSON and PNG plots).

`history.jsonl` in the run directory gets one line per completed step and survives restarts: a
resumed run first truncates it to the checkpoint's step, so the report never shows a step
twice, and restores the checkpoint's own record of that step when a kill came between the
checkpoint and the line (`resume`). `write_report` turns it into `report.json` (summary +
every step, and with `spec.evaluation` every held-out evaluation from `evaluations.jsonl`
with pass@k and the best version) and PNG plots. The summary totals every counted figure of
the step declaration (`dressage.api.figures`) under its record key, and gives each ratio figure
over those totals.

`run_summary` is what `dressage run` prints at the end: the failures of the whole run by reason
(failed attempts, failed groups, groups dropped other than at shutdown, samples trained
without a real reward), the
dataset's skipped rows, and how many of each warning stream were counted but not logged.
`no_real_reward` says whether the run trained samples and not one of them got a real reward
(every reward call failed), which `dressage run` treats as a failed run.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from dressage.api.figures import FigureKind, StepFigures, figure, figures_of, ratios, totals
from dressage.data.jsonl import JsonLines
from dressage.evaluation.figures import Evaluation, best
from dressage.evaluation.log import EvaluationLog
from dressage.rollout.collector import SHUTDOWN
from dressage.runner.ledger_report import LEDGER_PLOT, plot_ledger

_FAILED_ATTEMPTS = figure("failed_attempts").key
_FAILED_GROUPS = figure("failed_groups").key
_DROPPED_GROUPS = figure("dropped_groups").key
_REWARD_FAILED = figure("reward_failed_samples").key
_SAMPLES = figure("samples").key

_LAG_MEAN = figure("version_lag_mean").key
_LAG_MAX = figure("version_lag_max").key
_LAG_UNKNOWN = figure("version_lag_unknown_samples").key

HISTORY = "history.jsonl"
REPORT = "report.json"
EVAL_PLOTS = ("eval_pass_at_1.png", "eval_pass_at_1_time.png")
"""The evaluations' plots: pass@1 against the step and against the run's wall-clock."""
_REWARD = figure("reward").key


@dataclass(frozen=True)
class Plot:
    """One PNG of the report: the step-record keys it draws, each line's legend label, the
    title, and the y axis with its unit. A lone series also gets its 10-step mean."""

    series: tuple[tuple[str, str], ...]
    """`(step-record key, legend label)` of each line."""
    title: str
    ylabel: str


PLOTS: dict[str, Plot] = {
    "reward.png": Plot(((_REWARD, "mean reward"),), "Reward (mean per step)", "reward"),
    "logprob_diff.png": Plot(
        ((figure("train_rollout_logprob_abs_diff").key, "|train - rollout| log-probability"),),
        "Trainer vs engine log-probability gap (mean per trained token)",
        "nats",
    ),
    "entropy.png": Plot(
        ((figure("entropy").key, "policy entropy"),),
        "Policy entropy (mean per trained token)",
        "nats",
    ),
    "version_span.png": Plot(
        ((figure("version_span_mean").key, "versions spanned"),),
        "Weight versions a trajectory spans (mean per step)",
        "versions",
    ),
    "version_lag.png": Plot(
        (
            (_LAG_MEAN, "mean per sample"),
            (_LAG_MAX, "max"),
            (figure("version_lag_token_mean").key, "mean per trained token"),
        ),
        "Version lag (versions behind the trainer)",
        "versions",
    ),
    "step_seconds.png": Plot(
        (
            (figure("rollout_seconds").key, "waiting for the batch"),
            (figure("train_seconds").key, "training"),
            (figure("publish_seconds").key, "publishing weights"),
        ),
        "Time of each step",
        "seconds",
    ),
}
"""Each plot's file and what it draws."""


class History(JsonLines):
    """Append-only per-step records in `<run>/history.jsonl`."""

    def __init__(self, run_root: Path) -> None:
        super().__init__(Path(run_root) / HISTORY)

    def truncate(self, step: int) -> None:
        """Keep only records of steps `<= step` (the checkpoint a run resumes from)."""
        self.rewrite(r for r in self.read() if int(r["step"]) <= step)

    def resume(self, step: int, record: Mapping[str, Any] | None) -> None:
        """Line the history up with the checkpoint of `step`: drop later records, and append
        `record` (the checkpoint's record of `step`) when its line was never written."""
        self.truncate(step)
        records = self.read()
        missing = not records or int(records[-1]["step"]) < step
        if record is not None and int(record["step"]) == step and missing:
            self.append(record)


def evaluation_report(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`report.json`'s evaluation part: every evaluation (one version each, with pass@k) and
    the best version, whose weights pruning kept (`docs/operations.md`)."""
    evaluations = [Evaluation.from_dict(r) for r in records]
    top = best(evaluations)
    return {
        "evaluations": [e.to_dict() for e in evaluations],
        "best_evaluation": None if top is None else top.to_dict(),
    }


def plot_evaluations(run_root: Path, records: Sequence[Mapping[str, Any]]) -> list[Path]:
    """pass@1 (and the mean reward) of each evaluated version against the step and against
    the run's seconds (`EVAL_PLOTS`); nothing without evaluations."""
    from matplotlib.figure import Figure

    if not records:
        return []
    evaluations = sorted((Evaluation.from_dict(r) for r in records), key=lambda e: e.step)
    written = []
    axes: tuple[tuple[list[float], str], ...] = (
        ([float(e.step) for e in evaluations], "step"),
        ([e.elapsed for e in evaluations], "seconds since the run started"),
    )
    for filename, (xs, xlabel) in zip(EVAL_PLOTS, axes, strict=True):
        fig = Figure(figsize=(6, 3.5), dpi=100)
        fig.subplots_adjust(left=0.13, right=0.97, top=0.9, bottom=0.15)
        ax = fig.add_subplot()
        ax.plot(xs, [e.pass_at_1 for e in evaluations], "-", marker="o", label="pass@1")
        ax.plot(xs, [e.reward_mean for e in evaluations], "--", marker=".", label="mean reward")
        ax.set_title("Held-out evaluation (one weight version each)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("pass@1, reward")
        ax.legend(loc="best", fontsize=8)
        ax.grid(alpha=0.3)
        out = Path(run_root) / filename
        fig.savefig(out)
        written.append(out)
    return written


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over up to `window` values."""
    out: list[float] = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(fmean(chunk))
    return out


def summarize(
    steps: Sequence[Mapping[str, Any]],
    window: int = 10,
    declaration: type[StepFigures] = StepFigures,
) -> dict[str, Any]:
    """Headline figures: reward over the first and last steps, versions, every
    counted figure of the declaration summed over the run (drops and failures by reason), and
    every ratio figure of those sums (the run's trained tokens per second, its generated
    tokens per trained token, the fraction of its steps' time spent waiting for batches).

    `reward_first` and `reward_last` are the mean rewards of the first and the last
    `reward_window` steps with a reward, `min(window, steps // 2)` (at least 1): the two
    windows never overlap, so a short run's first and last differ whenever its rewards do (a
    run of one step has one reward for both)."""
    rewards = [float(s[_REWARD]) for s in steps if _REWARD in s]
    w = max(1, min(window, len(rewards) // 2))
    sums = totals(steps, declaration)
    return {
        "steps": len(steps),
        "first_version": steps[0]["version"] if steps else None,
        "last_version": steps[-1]["version"] if steps else None,
        "reward_first": fmean(rewards[:w]) if rewards else None,
        "reward_last": fmean(rewards[-w:]) if rewards else None,
        "reward_window": w,
        **sums,
        **ratios(sums, declaration),
        **lag_summary(steps),
        "step_seconds_mean": fmean(
            float(s.get("rollout_seconds", 0))
            + float(s.get("train_seconds", 0))
            + float(s.get("publish_seconds", 0))
            for s in steps
        )
        if steps
        else None,
    }


def lag_summary(steps: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """The run's version lag: the largest of any step, and the mean over every sample whose
    lag is known (each step's mean weighted by its samples of known lag)."""
    weighted = [
        (float(s[_LAG_MEAN]), int(s.get(_SAMPLES, 0)) - int(s.get(_LAG_UNKNOWN, 0)))
        for s in steps
        if _LAG_MEAN in s
    ]
    known = sum(n for _, n in weighted)
    maxima = [float(s[_LAG_MAX]) for s in steps if _LAG_MAX in s]
    return {
        _LAG_MEAN: sum(x * n for x, n in weighted) / known if known > 0 else None,
        _LAG_MAX: max(maxima, default=None),
    }


def _by_reason(counts: Mapping[str, Any]) -> str:
    ranked = sorted(counts.items(), key=lambda kv: (-int(kv[1]), kv[0]))
    return ", ".join(f"{reason} {int(n)}" for reason, n in ranked)


def with_unrecorded(summary: Mapping[str, Any], unrecorded: StepFigures | None) -> dict[str, Any]:
    """`summary` with the by-reason counts the collector made beyond the steps' records (the
    failed attempts and drops of groups never trained) added in."""
    out = dict(summary)
    if unrecorded is None:
        return out
    for f in figures_of(type(unrecorded)):
        if f.kind is FigureKind.BY_REASON:
            counts = Counter({k: int(v) for k, v in dict(out.get(f.key, {})).items()})
            counts.update(getattr(unrecorded, f.name))
            out[f.key] = dict(counts)
    return out


def no_real_reward(summary: Mapping[str, Any]) -> bool:
    """Whether the run (`summarize`'s figures) trained samples and every one of them was
    trained without a real reward, its reward call having failed."""
    samples = int(summary.get(_SAMPLES, 0))
    failed = sum(int(n) for n in dict(summary.get(_REWARD_FAILED, {})).values())
    return samples > 0 and failed >= samples


def run_summary(
    summary: Mapping[str, Any],
    *,
    bad_rows: Mapping[str, int] | None = None,
    suppressed: Mapping[str, int] | None = None,
) -> list[str]:
    """The end-of-run lines: the run's failures by reason (each figure named by what it
    counts), the dataset's skipped rows by reason, and the warnings counted but not logged
    (`suppressed`: what -> how many). Empty when nothing failed or was skipped."""
    lines: list[str] = []
    samples = int(summary.get(_SAMPLES, 0))
    reward_failed = dict(summary.get(_REWARD_FAILED, {}))
    if reward_failed:
        total = sum(int(n) for n in reward_failed.values())
        lines.append(
            f"samples trained with reward 0 because their reward call failed: {total} of "
            f"{samples} ({_by_reason(reward_failed)})"
        )
    for key, what in (
        (_FAILED_ATTEMPTS, "failed prompt-group attempts (each retry counts one)"),
        (_FAILED_GROUPS, "prompt groups with a failed attempt"),
        (_DROPPED_GROUPS, "prompt groups dropped"),
    ):
        counts = dict(summary.get(key, {}))
        counts.pop(SHUTDOWN, None)  # in flight when the run ended: not a failure
        if any(int(n) for n in counts.values()):
            total = sum(int(n) for n in counts.values())
            lines.append(f"{what}: {total} ({_by_reason(counts)})")
    if bad_rows:
        total = sum(bad_rows.values())
        lines.append(f"dataset rows skipped as unusable: {total} ({_by_reason(bad_rows)})")
    for what, count in (suppressed or {}).items():
        if count:
            lines.append(f"not logged, counted only: {count} {what}")
    if not lines:
        return []
    steps = int(summary.get("steps", 0))
    return [f"run summary ({steps} steps, {samples} samples trained):", *(f"  {x}" for x in lines)]


def write_report(
    run_root: Path,
    job: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    declaration: type[StepFigures] = StepFigures,
) -> Path:
    """Write `report.json` and the PNG plots from the history; return the report path."""
    run_root = Path(run_root)
    steps = History(run_root).read()
    evaluated = EvaluationLog(run_root).read()
    report = {
        "job": dict(job),
        "summary": summarize(steps, declaration=declaration),
        **(evaluation_report(evaluated) if evaluated else {}),
        **dict(extra or {}),
        "steps": steps,
        "plots": sorted(PLOTS) + (sorted(EVAL_PLOTS) if evaluated else []) + [LEDGER_PLOT],
    }
    path = run_root / REPORT
    path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    plot_history(run_root, steps)
    plot_ledger(run_root, steps, report.get("token_ledger"))
    plot_evaluations(run_root, evaluated)
    return path


def plot_history(run_root: Path, steps: Sequence[Mapping[str, Any]]) -> list[Path]:
    """One PNG per figure in `PLOTS`, drawn on `matplotlib.figure.Figure` directly: saving a
    PNG renders it with Agg whatever the backend, so no display, no pyplot state and no
    process-wide backend choice.

    The margins are fixed rather than fitted (`tight_layout` draws every figure twice): the
    plots are a run's last act, paid by every run, short ones included."""
    from matplotlib.figure import Figure

    written: list[Path] = []
    for filename, plot in PLOTS.items():
        fig = Figure(figsize=(6, 3.5), dpi=100)
        fig.subplots_adjust(left=0.13, right=0.97, top=0.9, bottom=0.15)
        plot_axes(fig.add_subplot(), plot, steps)
        out = run_root / filename
        fig.savefig(out)
        written.append(out)
    return written


def plot_axes(ax: Any, plot: Plot, steps: Sequence[Mapping[str, Any]]) -> None:
    """Draw `plot` of `steps` on the matplotlib axes `ax`: its lines with their labels, the
    title, the y unit, and whole steps on the x axis."""
    from matplotlib.ticker import MaxNLocator

    xs = [int(s["step"]) for s in steps]
    drawn = False
    for (key, label), style in zip(plot.series, itertools.cycle(("-", "--", ":")), strict=False):
        points = [(x, float(s[key])) for x, s in zip(xs, steps, strict=True) if key in s]
        if not points:
            continue
        drawn = True
        px, py = zip(*points, strict=True)
        ax.plot(px, py, style, marker=".", linewidth=0.8, alpha=0.6, label=label)
        if len(plot.series) == 1 and len(py) >= 5:
            ax.plot(px, moving_average(py, 10), linewidth=2.0, label="10-step mean")
    if drawn:
        ax.legend(loc="best", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(plot.title)
    ax.set_xlabel("step")
    ax.set_ylabel(plot.ylabel)
    # Steps are whole: a short run would otherwise get ticks at 1.5, 2.5, ...
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
