"""Trained-sample throughput of `fully_async` rollout against `sync` rollout, one job.

Runs the README's learning job (`examples/local-tiny.yaml`: arithmetic, tiny model with a
cached warm start, 16 groups x 8 samples per step) for `--steps` steps with `rollout.mode`
`sync` and then `fully_async` (concurrency 16, one batch ahead), one run after the other so they
never share the CPU. Throughput is trained samples per second of step wall time (rollout wait +
train + publish, from the run's history), excluding process startup, the warm start and step 1
(which in both modes includes the first forward passes and, for async, filling the pipeline).
Prints both side by side with the async/sync ratio and the median step time, and writes
`benchmarks/results/async_speedup.json`.

    python benchmarks/async_speedup.py [--steps 12] [--repeats 1] [--out PATH]

On 2 CPU cores the engine and the trainer compete for the same cores, so overlapping them
gains little; GPU-cluster figures (AReaL 2.77x, verl 2.35-2.67x) are printed for context only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import ROOT, base_job, fmt, median, merged, run_job, step_seconds

MODES = ("sync", "fully_async")
ANCHORS = "AReaL reports 2.77x and verl 2.35-2.67x (GPU clusters, large models)"


def job_for(mode: str, repeat: int) -> dict[str, Any]:
    name = f"speedup-{mode.replace('_', '-')}-{repeat}"
    rollout: dict[str, Any] = {"mode": mode}
    if mode != "sync":
        rollout["concurrency"] = 16  # one batch of groups in flight ahead of the trainer
    return merged(base_job(), {"metadata": {"name": name}, "spec": {"rollout": rollout}})


def measure(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Throughput figures of one run, from its history (step 1 excluded)."""
    steady = history[1:] if len(history) > 1 else history
    times = [step_seconds(h) for h in steady]
    samples = sum(float(h.get("samples", 0.0)) for h in steady)
    total = sum(times)
    return {
        "steps_measured": len(steady),
        "samples": samples,
        "seconds": round(total, 3),
        "samples_per_s": samples / total if total > 0 else None,
        "median_step_s": median(times),
        "median_rollout_wait_s": median([float(h["rollout_seconds"]) for h in steady]),
        "median_train_s": median([float(h["train_seconds"]) for h in steady]),
        "final_reward": history[-1].get("reward") if history else None,
        "dropped_groups": sum(sum(h.get("dropped_groups", {}).values()) for h in history),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="steps per run (default 12)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode (default 1)")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "async_speedup.json",
        help="where to write the JSON results",
    )
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (step 1 is excluded from the figures)")

    print(f"async speedup: examples/local-tiny.yaml, {args.steps} steps, {args.repeats} repeat(s)")
    print(f"context: {ANCHORS}; here 2 CPU cores shared by engine and trainer")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="dressage-speedup-") as tmp:
        for repeat in range(args.repeats):
            for mode in MODES:
                result = run_job(job_for(mode, repeat), Path(tmp), steps=args.steps)
                if not result.ok:
                    print(f"{mode} run {repeat} failed (exit {result.returncode}):")
                    print(result.output_tail)
                    return 1
                figures = measure(result.history)
                figures["wall_seconds"] = round(result.wall_seconds, 1)
                figures["history"] = result.history
                runs[mode].append(figures)
                print(
                    f"  {mode:<12} run {repeat}: {fmt(figures['samples_per_s'], 1)} samples/s, "
                    f"median step {fmt(figures['median_step_s'], 2)} s, "
                    f"process wall {result.wall_seconds:.1f} s"
                )

    summary: dict[str, dict[str, float | None]] = {}
    for mode in MODES:
        summary[mode] = {
            "samples_per_s": median([r["samples_per_s"] for r in runs[mode]]),
            "median_step_s": median([r["median_step_s"] for r in runs[mode]]),
            "median_rollout_wait_s": median([r["median_rollout_wait_s"] for r in runs[mode]]),
            "median_train_s": median([r["median_train_s"] for r in runs[mode]]),
        }
    sync_rate = summary["sync"]["samples_per_s"]
    async_rate = summary["fully_async"]["samples_per_s"]
    ratio = async_rate / sync_rate if sync_rate and async_rate else None

    print()
    print(
        f"{'mode':<12} {'samples/s':>10} {'median step s':>14} {'rollout wait s':>15} "
        f"{'train s':>8}"
    )
    for mode in MODES:
        s = summary[mode]
        print(
            f"{mode:<12} {fmt(s['samples_per_s'], 1):>10} {fmt(s['median_step_s'], 2):>14} "
            f"{fmt(s['median_rollout_wait_s'], 2):>15} {fmt(s['median_train_s'], 2):>8}"
        )
    print(f"ratio fully_async/sync: {fmt(ratio, 2)}x  (anchors: {ANCHORS})")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "async_speedup",
                "job": "examples/local-tiny.yaml",
                "steps": args.steps,
                "repeats": args.repeats,
                "summary": summary,
                "ratio_async_over_sync": ratio,
                "anchors": {"AReaL": 2.77, "verl": [2.35, 2.67]},
                "runs": runs,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
