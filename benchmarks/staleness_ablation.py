"""Staleness controls on and off, in miniature, over several seeds.

The reference's two experiments, on jobs that learn in a local CPU run:

(a) Whitebox multi-turn async on `examples/local-household.yaml` (the household environment:
    the agent opens numbered boxes and takes the object it was asked for, every turn through the
    proxy). Concurrency 48 groups (> batch size 16), so the worker runs ahead of the trainer and
    batches mix weight versions. Partial rollout is on with no preempt limit, so an episode
    keeps going across weight updates as in a fully async system; without partial rollout the
    proxy refuses a trajectory whose turns would change version, and most multi-turn groups
    would be retried instead. `staleness.keepVersions` 0 (off) against 2.
(b) Partial rollout on `examples/local-tiny.yaml` (arithmetic) with `maxNewTokens` 16 and
    concurrency 48, so weight updates interrupt generations in flight and they resume under the
    new weights; `keepVersions` 0 and `maxPartialRolloutPreempts` unset (unlimited) against 2.
    The reward is the exact match of the completion's leading number, so the longer budget
    changes how long a generation may run, not what is rewarded. The reference ran this one
    with a blackbox coding agent; here the generation is the whitebox single-turn one, because
    a blackbox program starts one process per trajectory, more than two cores can run per step.

Each (experiment, setting) runs for `--steps` steps with `--seeds` training seeds (the trainer
and sampler seed; the prompt stream and the cached warm start are shared), one run after the
other. Prints one row per (experiment, setting) aggregated over seeds and writes per-seed
details to `benchmarks/results/staleness_ablation.json`.

    python benchmarks/staleness_ablation.py [--steps 24] [--seeds 2]
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

HOUSEHOLD = ROOT / "examples" / "local-household.yaml"
ARITHMETIC = ROOT / "examples" / "local-tiny.yaml"

SMOOTHING = 3
"""Steps in the trailing reward mean compared against the threshold (one step is noisy)."""
FINAL_WINDOW = 5
"""Last steps averaged into the final reward."""


@dataclass(frozen=True)
class Setting:
    experiment: str
    label: str
    overrides: dict[str, Any]
    job: Path = ARITHMETIC
    threshold: float = 0.5
    """Reward threshold of the `steps to` column (the tasks start from different rewards)."""


MULTI_TURN_ASYNC = {"mode": "partial_async", "concurrency": 48}
SETTINGS = (
    Setting(
        "a multi-turn",
        "keepVersions 0",
        {
            "staleness": {"keepVersions": 0, "maxPartialRolloutPreempts": None},
            "rollout": MULTI_TURN_ASYNC,
        },
        HOUSEHOLD,
        0.4,
    ),
    Setting(
        "a multi-turn",
        "keepVersions 2",
        {
            "staleness": {"keepVersions": 2, "maxPartialRolloutPreempts": None},
            "rollout": MULTI_TURN_ASYNC,
        },
        HOUSEHOLD,
        0.4,
    ),
    Setting(
        "b partial_async",
        "preempts unset",
        {
            "staleness": {"keepVersions": 0},
            "rollout": {"mode": "partial_async", "concurrency": 48, "maxNewTokens": 16},
        },
    ),
    Setting(
        "b partial_async",
        "preempts 2",
        {
            "staleness": {"keepVersions": 0, "maxPartialRolloutPreempts": 2},
            "rollout": {"mode": "partial_async", "concurrency": 48, "maxNewTokens": 16},
        },
    ),
)


PROXY = {"maxConcurrency": 512}
"""48 groups x 8 samples in flight exceed the proxy's default admission limit (256), which
would answer 429 and turn the ablation into one of retries; the limit is raised above 384."""


def job_for(setting: Setting, seed: int) -> dict[str, Any]:
    slug = f"{setting.experiment[0]}-{setting.label.replace(' ', '-').lower()}-s{seed}"
    spec = merged(setting.overrides, {"training": {"seed": seed}, "proxy": PROXY})
    return merged(base_job(setting.job), {"metadata": {"name": f"ablation-{slug}"}, "spec": spec})


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
    parser.add_argument("--steps", type=int, default=24, help="steps per run (default 24)")
    parser.add_argument("--seeds", type=int, default=2, help="training seeds (default 2)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="reward threshold for every setting (default: 0.4 for (a), 0.5 for (b))",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=300.0,
        help="seconds before a run is stopped and reported as timed out (default 300)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "staleness_ablation.json",
        help="where to write the JSON results",
    )
    args = parser.parse_args()

    print(
        f"staleness ablation: (a) household multi-turn, (b) arithmetic partial rollout; "
        f"{args.steps} steps x {args.seeds} seed(s) per setting"
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
                threshold = setting.threshold if args.threshold is None else args.threshold
                figures = seed_figures(result.history, threshold)
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
                    "job": str(setting.job.relative_to(ROOT)),
                    "threshold": threshold,
                    "overrides": setting.overrides,
                    "aggregate": aggregate(per_seed),
                    "seeds": per_seed,
                }
            )

    print()
    print(
        f"steps to: first step whose {SMOOTHING}-step trailing mean reward >= the threshold "
        f"(per seed); final: mean of the last {FINAL_WINDOW} steps; dropped and failures: "
        f"totals over seeds"
    )
    header = (
        f"{'experiment':<16} {'setting':<15} {'thresh':>6} {'steps to':>9} {'final':>6} "
        f"{'lp diff':>8} {'lp peak':>8} {'span':>5} {'span':>5} {'dropped':>8} {'stale':>6} "
        f"{'runs':>5}"
    )
    print(header)
    print(
        f"{'':<16} {'':<15} {'':>6} {'':>9} {'reward':>6} {'mean':>8} {'':>8} "
        f"{'mean':>5} {'max':>5} {'groups':>8} {'fails':>6} {'ok':>5}"
    )
    for row in rows:
        a = row["aggregate"]
        print(
            f"{row['experiment']:<16} {row['setting']:<15} {row['threshold']:>6} "
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
