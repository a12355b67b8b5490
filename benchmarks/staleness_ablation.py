"""Staleness controls on and off, in miniature, over several seeds.

The reference's two experiments on one multi-turn agent job that learns in a local CPU run,
`examples/local-household.yaml`: the household environment (the whitebox agent opens numbered
boxes and takes the object it was asked for, every turn through the proxy), partial async
rollout, 48 groups in flight against batches of 16, so the worker runs ahead of the trainer,
batches mix weight versions, and episodes keep going across weight updates (each turn resumes
under the newest weights). Six settings; the baseline is shared by every experiment:

- baseline: `keepVersions` 0 and `maxPartialRolloutPreempts` unset (both controls off);
- (a) batch-level control: `keepVersions` 2 with admission control off (the filter drops what
  is already stale) and on (`staleness.admission`: the worker starts no group the window would
  reject on arrival);
- (b) partial-rollout control: `maxPartialRolloutPreempts` 2 (an episode may span at most 3
  versions; beyond that the proxy answers 502 and the group is retried whole);
- (c) off-policy correction: token-level truncated importance sampling
  (`training.offPolicyCorrection.mode: tis`, clip 2) on the baseline and on (a) with admission.

The reference ran (b) with a blackbox coding agent; here both run the whitebox agent, whose
multi-turn episodes are the long-horizon trajectories that cross weight updates (a blackbox
program is one process per trajectory, more than two cores can start per step).

Each setting runs for `--steps` steps with `--seeds` training seeds (the trainer and sampler
seed; the prompt stream and the cached warm start are shared), one run after the other. Besides
the steps to the reward threshold it reports the wall-clock seconds to it (the sum of the step
times up to that step: rollout wait + train + publish, startup excluded), since dropping groups
costs rollout time, not steps. Prints one row per setting aggregated over seeds (medians of
the per-seed figures) and writes per-seed details to
`benchmarks/results/staleness_ablation.json`, with the machine's load average around each run.

    python benchmarks/staleness_ablation.py [--steps 30] [--seeds 3] [--threshold 0.6]
        [--settings baseline,a-admission,...] [--quick]

A run takes about 3 minutes at 30 steps on an idle 2-core machine: the full ablation (6 settings
x 3 seeds) about an hour. `--quick` (10 steps, 3 seeds, threshold 0.55) takes about 20 minutes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import (
    ROOT,
    base_job,
    fmt,
    load_average,
    mean,
    median,
    merged,
    run_job,
    status_of,
    step_seconds,
    write_result,
)

JOB = ROOT / "examples" / "local-household.yaml"

SMOOTHING = 3
"""Steps in the trailing reward mean compared against the threshold (one step is noisy)."""
FINAL_WINDOW = 5
"""Last steps averaged into the final reward."""


@dataclass(frozen=True)
class Setting:
    experiment: str
    label: str
    overrides: dict[str, Any]


ASYNC = {"mode": "partial_async", "concurrency": 48}
OFF = {"keepVersions": 0, "maxPartialRolloutPreempts": None}
BATCH = {"keepVersions": 2, "maxPartialRolloutPreempts": None}
TIS = {"offPolicyCorrection": {"mode": "tis", "tisClip": 2.0}}
SETTINGS = (
    Setting("baseline", "both off", {"staleness": OFF, "rollout": ASYNC}),
    Setting(
        "a batch-level",
        "keepVersions 2",
        {"staleness": {**BATCH, "admission": False}, "rollout": ASYNC},
    ),
    Setting(
        "a batch-level",
        "+ admission",
        {"staleness": {**BATCH, "admission": True}, "rollout": ASYNC},
    ),
    Setting(
        "b partial",
        "preempts 2",
        {"staleness": {"keepVersions": 0, "maxPartialRolloutPreempts": 2}, "rollout": ASYNC},
    ),
    Setting("c correction", "off + tis", {"staleness": OFF, "rollout": ASYNC, "training": TIS}),
    Setting(
        "c correction",
        "kv2 adm + tis",
        {"staleness": {**BATCH, "admission": True}, "rollout": ASYNC, "training": TIS},
    ),
)
KEYS = ("baseline", "a", "a-admission", "b", "c-tis", "c-admission-tis")
"""`--settings` names of SETTINGS, in order."""
QUICK = {"steps": 10, "seeds": 3, "threshold": 0.55}


PROXY = {"maxConcurrency": 512}
"""48 groups x 8 samples in flight exceed the proxy's default admission limit (256), which
would answer 429 and turn the ablation into one of retries; the limit is raised above 384."""


def job_for(setting: Setting, seed: int) -> dict[str, Any]:
    slug = f"{KEYS[SETTINGS.index(setting)]}-s{seed}"
    spec = merged(setting.overrides, {"training": {"seed": seed}, "proxy": PROXY})
    return merged(base_job(JOB), {"metadata": {"name": f"ablation-{slug}"}, "spec": spec})


def steps_to_threshold(rewards: list[float], threshold: float) -> int | None:
    """First step whose trailing `SMOOTHING`-step mean reward reaches `threshold`."""
    for i in range(len(rewards)):
        window = rewards[max(0, i + 1 - SMOOTHING) : i + 1]
        if sum(window) / len(window) >= threshold:
            return i + 1
    return None


def seconds_to_step(history: list[dict[str, Any]], step: int | None) -> float | None:
    """Wall-clock seconds of steps 1..`step` (rollout wait + train + publish)."""
    if step is None:
        return None
    return round(sum(step_seconds(h) for h in history[:step]), 2)


def seed_figures(history: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    rewards = [float(h.get("reward", 0.0)) for h in history]
    reached_at = steps_to_threshold(rewards, threshold)
    diffs = [float(h.get("train_rollout_logprob_abs_diff", 0.0)) for h in history]
    spans = [float(h.get("staleness/version_span_mean", 0.0)) for h in history]
    span_max = [float(h.get("staleness/version_span_max", 0.0)) for h in history]
    dropped: dict[str, int] = {}
    for h in history:
        for reason, n in h.get("dropped_groups", {}).items():
            dropped[reason] = dropped.get(reason, 0) + int(n)
    return {
        "steps": len(history),
        "steps_to_threshold": reached_at,
        "seconds_to_threshold": seconds_to_step(history, reached_at),
        "seconds_per_step": (
            round(sum(step_seconds(h) for h in history) / len(history), 3) if history else None
        ),
        "final_reward": mean(rewards[-FINAL_WINDOW:]),
        "logprob_diff_mean": mean(diffs),
        "logprob_diff_peak": max(diffs, default=None),
        "version_span_mean": mean(spans),
        "version_span_max": max(span_max, default=None),
        "dropped_groups": sum(dropped.values()),
        "dropped_by_reason": dropped,
        "trained_groups": int(sum(float(h.get("groups", 0.0)) for h in history)),
        "admissions_held": sum(int(h.get("admissions_held", 0)) for h in history),
        "mismatch_kl_k3_mean": mean(
            [float(h["mismatch_kl_k3"]) for h in history if "mismatch_kl_k3" in h]
        ),
        "clipped_fraction_mean": mean(
            [
                float(h["off_policy_clipped_fraction"])
                for h in history
                if "off_policy_clipped_fraction" in h
            ]
        ),
        "is_ess_fraction_mean": mean(
            [float(h["is_ess_fraction"]) for h in history if "is_ess_fraction" in h]
        ),
        "staleness_failures": sum(int(h.get("staleness_failures", 0)) for h in history),
        "retries": sum(int(h.get("retries", 0)) for h in history),
        "rewards": rewards,
    }


def aggregate(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    def values(key: str) -> list[float]:
        return [float(s[key]) for s in seeds if s[key] is not None]

    return {
        "steps_to_threshold": [s["steps_to_threshold"] for s in seeds],
        "seconds_to_threshold": [s["seconds_to_threshold"] for s in seeds],
        "median_seconds_to_threshold": median(values("seconds_to_threshold")),
        "seeds_reaching_threshold": sum(1 for s in seeds if s["steps_to_threshold"] is not None),
        "seconds_per_step": median(values("seconds_per_step")),
        "final_reward": mean(values("final_reward")),
        "logprob_diff_mean": mean(values("logprob_diff_mean")),
        "logprob_diff_peak": max(values("logprob_diff_peak"), default=None),
        "version_span_mean": mean(values("version_span_mean")),
        "version_span_max": max(values("version_span_max"), default=None),
        "dropped_groups": sum(int(s["dropped_groups"]) for s in seeds),
        "trained_groups": sum(int(s["trained_groups"]) for s in seeds),
        "admissions_held": sum(int(s["admissions_held"]) for s in seeds),
        "staleness_failures": sum(int(s["staleness_failures"]) for s in seeds),
        "mismatch_kl_k3_mean": mean(values("mismatch_kl_k3_mean")),
        "clipped_fraction_mean": mean(values("clipped_fraction_mean")),
        "is_ess_fraction_mean": mean(values("is_ess_fraction_mean")),
        "runs_ok": sum(1 for s in seeds if s["status"] == "ok"),
    }


def reached(steps: list[int | None]) -> str:
    return "/".join("not" if s is None else str(s) for s in steps)


def rows_of(
    settings: list[Setting], per_setting: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """One row per setting with the seeds run so far."""
    return [
        {
            "experiment": setting.experiment,
            "setting": setting.label,
            "key": KEYS[SETTINGS.index(setting)],
            "overrides": setting.overrides,
            "aggregate": aggregate(seeds),
            "seeds": seeds,
        }
        for setting, seeds in zip(settings, per_setting, strict=True)
        if seeds
    ]


def write(
    args: argparse.Namespace, rows: list[dict[str, Any]], elapsed: float, *, complete: bool
) -> None:
    write_result(
        args.out,
        {
            "benchmark": "staleness_ablation",
            "job": str(JOB.relative_to(ROOT)),
            "complete": complete,
            "quick": args.quick,
            "threshold": args.threshold,
            "steps": args.steps,
            "seeds": args.seeds,
            "smoothing_steps": SMOOTHING,
            "final_window": FINAL_WINDOW,
            "wall_seconds": round(elapsed, 1),
            "rows": rows,
        },
        announce=complete,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 30)")
    parser.add_argument("--seeds", type=int, default=None, help="training seeds (default 3)")
    parser.add_argument(
        "--threshold", type=float, default=None, help="reward threshold (default 0.6)"
    )
    parser.add_argument(
        "--settings",
        default=",".join(KEYS),
        help=f"comma-separated subset of {', '.join(KEYS)} (default: all)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"bounded run: {QUICK['steps']} steps, {QUICK['seeds']} seeds, threshold "
        f"{QUICK['threshold']} unless given",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=600.0,
        help="seconds before a run is stopped and reported as timed out (default 600)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "staleness_ablation.json",
        help="where to write the JSON results",
    )
    args = parser.parse_args()
    defaults = QUICK if args.quick else {"steps": 30, "seeds": 3, "threshold": 0.6}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.steps < 1 or args.seeds < 1:
        parser.error("--steps and --seeds must be >= 1")
    chosen = [k for k in args.settings.split(",") if k]
    unknown = sorted(set(chosen) - set(KEYS))
    if unknown or not chosen:
        parser.error(f"--settings: unknown {unknown}; known: {', '.join(KEYS)}")
    settings = [s for k, s in zip(KEYS, SETTINGS, strict=True) if k in chosen]

    print(
        f"staleness ablation: {JOB.relative_to(ROOT)}, {args.steps} steps x {args.seeds} "
        f"seed(s) x {len(settings)} setting(s), load {load_average()}"
    )
    started = time.monotonic()
    per_setting: list[list[dict[str, Any]]] = [[] for _ in settings]
    with tempfile.TemporaryDirectory(prefix="dressage-ablation-") as tmp:
        # Seeds outermost: every setting sees the machine's load at about the same times.
        for seed in range(args.seeds):
            for index, setting in enumerate(settings):
                load_before = load_average()
                result = run_job(
                    job_for(setting, seed), Path(tmp), steps=args.steps, timeout_s=args.run_timeout
                )
                figures = seed_figures(result.history, args.threshold)
                figures["seed"] = seed
                figures["wall_seconds"] = round(result.wall_seconds, 1)
                figures["load_before"] = load_before
                figures["load_after"] = load_average()
                figures["status"] = status_of(result.ok, result.timed_out, len(result.history))
                if figures["status"] != "ok":
                    figures["output_tail"] = result.output_tail
                per_setting[index].append(figures)
                # Written after every run, so a run stopped early keeps what it measured.
                rows = rows_of(settings, per_setting)
                write(args, rows, time.monotonic() - started, complete=False)
                print(
                    f"  {setting.experiment} / {setting.label} seed {seed}: {figures['status']}, "
                    f"{len(result.history)} steps, final reward {fmt(figures['final_reward'])}, "
                    f"to threshold {figures['steps_to_threshold']} steps / "
                    f"{fmt(figures['seconds_to_threshold'], 1)} s, "
                    f"{result.wall_seconds:.0f} s, load {load_before}->{figures['load_after']}"
                )
    rows = rows_of(settings, per_setting)
    write(args, rows, time.monotonic() - started, complete=True)

    print()
    print(
        f"steps/s to: first step whose {SMOOTHING}-step trailing mean reward >= {args.threshold} "
        f"(per seed) and the step seconds up to it (median of the seeds that reached it); "
        f"final: mean of the last {FINAL_WINDOW} steps; lp diff: train_rollout_logprob_abs_diff; "
        f"drops and fails: totals over seeds"
    )
    header = (
        f"{'experiment':<14} {'setting':<14} {'steps to':>9} {'s to':>6} {'s/step':>6} "
        f"{'final':>6} {'lp diff':>8} {'k3 KL':>8} {'ESS':>5} {'span':>5} {'drops':>6} "
        f"{'held':>5} {'fails':>5} {'ok':>4}"
    )
    print(header)
    for row in rows:
        a = row["aggregate"]
        print(
            f"{row['experiment']:<14} {row['setting']:<14} "
            f"{reached(a['steps_to_threshold']):>9} {fmt(a['median_seconds_to_threshold'], 0):>6} "
            f"{fmt(a['seconds_per_step'], 2):>6} {fmt(a['final_reward']):>6} "
            f"{fmt(a['logprob_diff_mean'], 4):>8} {fmt(a['mismatch_kl_k3_mean'], 4):>8} "
            f"{fmt(a['is_ess_fraction_mean'], 2):>5} {fmt(a['version_span_mean'], 2):>5} "
            f"{a['dropped_groups']:>6} {a['admissions_held']:>5} {a['staleness_failures']:>5} "
            f"{a['runs_ok']}/{len(row['seeds'])}"
        )
    elapsed = time.monotonic() - started
    print(f"total wall time {elapsed:.0f} s")

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
