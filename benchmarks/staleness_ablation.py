"""Staleness controls on and off, in miniature, over several seeds.

The reference's two experiments on one multi-turn agent job that learns in a local CPU run,
`examples/local-household.yaml`: the household environment (the whitebox agent opens numbered
boxes and takes the object it was asked for, every turn through the proxy), partial async
rollout, 48 groups in flight against batches of 16, so the worker runs ahead of the trainer,
batches mix weight versions, and episodes keep going across weight updates (each turn resumes
under the newest weights). Three settings; the baseline is shared by both experiments:

- baseline: `keepVersions` 0 and `maxPartialRolloutPreempts` unset (both controls off);
- (a) batch-level control: `keepVersions` 2;
- (b) partial-rollout control: `maxPartialRolloutPreempts` 2 (an episode may span at most 3
  versions; beyond that the proxy answers 502 and the group is retried whole).

The reference ran (b) with a blackbox coding agent; here both run the whitebox agent, whose
multi-turn episodes are the long-horizon trajectories that cross weight updates (a blackbox
program is one process per trajectory, more than two cores can start per step).

Each setting runs for `--steps` steps with `--seeds` training seeds (the trainer and sampler
seed; the prompt stream and the cached warm start are shared), one run after the other. Prints
one row per setting aggregated over seeds and writes per-seed details to
`benchmarks/results/staleness_ablation.json`.

    python benchmarks/staleness_ablation.py [--steps 30] [--seeds 3] [--threshold 0.6]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import ROOT, base_job, fmt, mean, merged, run_job

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
SETTINGS = (
    Setting(
        "baseline",
        "both off",
        {"staleness": {"keepVersions": 0, "maxPartialRolloutPreempts": None}, "rollout": ASYNC},
    ),
    Setting(
        "a batch-level",
        "keepVersions 2",
        {"staleness": {"keepVersions": 2, "maxPartialRolloutPreempts": None}, "rollout": ASYNC},
    ),
    Setting(
        "b partial",
        "preempts 2",
        {"staleness": {"keepVersions": 0, "maxPartialRolloutPreempts": 2}, "rollout": ASYNC},
    ),
)


PROXY = {"maxConcurrency": 512}
"""48 groups x 8 samples in flight exceed the proxy's default admission limit (256), which
would answer 429 and turn the ablation into one of retries; the limit is raised above 384."""


def job_for(setting: Setting, seed: int) -> dict[str, Any]:
    slug = f"{setting.label.replace(' ', '-').lower()}-s{seed}"
    spec = merged(setting.overrides, {"training": {"seed": seed}, "proxy": PROXY})
    return merged(base_job(JOB), {"metadata": {"name": f"ablation-{slug}"}, "spec": spec})


def steps_to_threshold(rewards: list[float], threshold: float) -> int | None:
    """First step whose trailing `SMOOTHING`-step mean reward reaches `threshold`."""
    for i in range(len(rewards)):
        window = rewards[max(0, i + 1 - SMOOTHING) : i + 1]
        if sum(window) / len(window) >= threshold:
            return i + 1
    return None


def seed_figures(history: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    rewards = [float(h.get("reward", 0.0)) for h in history]
    diffs = [float(h.get("train_rollout_logprob_abs_diff", 0.0)) for h in history]
    spans = [float(h.get("staleness/version_span_mean", 0.0)) for h in history]
    span_max = [float(h.get("staleness/version_span_max", 0.0)) for h in history]
    dropped: dict[str, int] = {}
    for h in history:
        for reason, n in h.get("dropped_groups", {}).items():
            dropped[reason] = dropped.get(reason, 0) + int(n)
    return {
        "steps": len(history),
        "steps_to_threshold": steps_to_threshold(rewards, threshold),
        "final_reward": mean(rewards[-FINAL_WINDOW:]),
        "logprob_diff_mean": mean(diffs),
        "logprob_diff_peak": max(diffs, default=None),
        "version_span_mean": mean(spans),
        "version_span_max": max(span_max, default=None),
        "dropped_groups": sum(dropped.values()),
        "dropped_by_reason": dropped,
        "staleness_failures": sum(int(h.get("staleness_failures", 0)) for h in history),
        "retries": sum(int(h.get("retries", 0)) for h in history),
        "rewards": rewards,
    }


def aggregate(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    def values(key: str) -> list[float]:
        return [float(s[key]) for s in seeds if s[key] is not None]

    return {
        "steps_to_threshold": [s["steps_to_threshold"] for s in seeds],
        "final_reward": mean(values("final_reward")),
        "logprob_diff_mean": mean(values("logprob_diff_mean")),
        "logprob_diff_peak": max(values("logprob_diff_peak"), default=None),
        "version_span_mean": mean(values("version_span_mean")),
        "version_span_max": max(values("version_span_max"), default=None),
        "dropped_groups": sum(int(s["dropped_groups"]) for s in seeds),
        "staleness_failures": sum(int(s["staleness_failures"]) for s in seeds),
        "runs_ok": sum(1 for s in seeds if s["status"] == "ok"),
    }


def status_of(ok: bool, timed_out: bool, steps: int) -> str:
    if timed_out:
        return f"timed out at step {steps}"
    return "ok" if ok else f"failed at step {steps}"


def reached(steps: list[int | None]) -> str:
    return "/".join("not" if s is None else str(s) for s in steps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per run (default 30)")
    parser.add_argument("--seeds", type=int, default=3, help="training seeds (default 3)")
    parser.add_argument(
        "--threshold", type=float, default=0.6, help="reward threshold (default 0.6)"
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

    print(
        f"staleness ablation: {JOB.relative_to(ROOT)}, {args.steps} steps x {args.seeds} "
        f"seed(s) per setting"
    )
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dressage-ablation-") as tmp:
        for setting in SETTINGS:
            per_seed: list[dict[str, Any]] = []
            for seed in range(args.seeds):
                result = run_job(
                    job_for(setting, seed), Path(tmp), steps=args.steps, timeout_s=args.run_timeout
                )
                figures = seed_figures(result.history, args.threshold)
                figures["seed"] = seed
                figures["wall_seconds"] = round(result.wall_seconds, 1)
                figures["status"] = status_of(result.ok, result.timed_out, len(result.history))
                if figures["status"] != "ok":
                    figures["output_tail"] = result.output_tail
                per_seed.append(figures)
                print(
                    f"  {setting.experiment} / {setting.label} seed {seed}: {figures['status']}, "
                    f"{len(result.history)} steps, final reward {fmt(figures['final_reward'])}, "
                    f"{result.wall_seconds:.0f} s"
                )
            rows.append(
                {
                    "experiment": setting.experiment,
                    "setting": setting.label,
                    "overrides": setting.overrides,
                    "aggregate": aggregate(per_seed),
                    "seeds": per_seed,
                }
            )

    print()
    print(
        f"steps to: first step whose {SMOOTHING}-step trailing mean reward >= {args.threshold} "
        f"(per seed); final: mean of the last {FINAL_WINDOW} steps; dropped and failures: "
        f"totals over seeds"
    )
    header = (
        f"{'experiment':<16} {'setting':<15} {'steps to':>9} {'final':>6} "
        f"{'lp diff':>8} {'lp peak':>8} {'span':>5} {'span':>5} {'dropped':>8} {'stale':>6} "
        f"{'runs':>5}"
    )
    print(header)
    print(
        f"{'':<16} {'':<15} {args.threshold:>9} {'reward':>6} {'mean':>8} {'':>8} "
        f"{'mean':>5} {'max':>5} {'groups':>8} {'fails':>6} {'ok':>5}"
    )
    for row in rows:
        a = row["aggregate"]
        print(
            f"{row['experiment']:<16} {row['setting']:<15} "
            f"{reached(a['steps_to_threshold']):>9} {fmt(a['final_reward']):>6} "
            f"{fmt(a['logprob_diff_mean'], 4):>8} {fmt(a['logprob_diff_peak'], 4):>8} "
            f"{fmt(a['version_span_mean'], 2):>5} {fmt(a['version_span_max'], 0):>5} "
            f"{a['dropped_groups']:>8} {a['staleness_failures']:>6} "
            f"{a['runs_ok']}/{len(row['seeds']):<3}"
        )
    elapsed = time.monotonic() - started
    print(f"total wall time {elapsed:.0f} s")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "staleness_ablation",
                "job": str(JOB.relative_to(ROOT)),
                "threshold": args.threshold,
                "steps": args.steps,
                "seeds": args.seeds,
                "smoothing_steps": SMOOTHING,
                "final_window": FINAL_WINDOW,
                "wall_seconds": round(elapsed, 1),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
