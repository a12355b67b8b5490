"""Drops and trained-sample throughput of the main job with admission control off and on.

Runs the README's learning job (`examples/local-tiny.yaml`: fully async, 32 groups in flight,
batches of 16, `keepVersions: 2`) for `--steps` steps with `spec.staleness.admission` false and
then true, alternating, `--repeats` times each, one run after the other so they never share
the CPU. For each run: groups dropped by the batch-level filter per trained group (every reason:
`window_advanced` and `stale_version`), trained samples per second of step wall time (rollout
wait + train + publish, step 1 excluded), and the groups admission held back. Prints medians
side by side and writes `benchmarks/results/admission.json`.

    python benchmarks/admission.py [--steps 40] [--repeats 2] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import ROOT, base_job, fmt, median, merged, run_job, step_seconds, write_result

SETTINGS = (("off", False), ("on", True))


def job_for(label: str, admission: bool, repeat: int) -> dict[str, Any]:
    name = f"admission-{label}-{repeat}"
    return merged(
        base_job(),
        {
            "metadata": {"name": name},
            # the window by hand (the example itself states a budget, `mode: auto`)
            "spec": {
                "staleness": {
                    "mode": None,
                    "budget": None,
                    "keepVersions": 2,
                    "admission": admission,
                }
            },
        },
    )


def measure(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures of one run from its history (throughput without step 1)."""
    steady = history[1:] if len(history) > 1 else history
    seconds = sum(step_seconds(h) for h in steady)
    samples = sum(float(h.get("samples", 0.0)) for h in steady)
    trained_groups = sum(float(h.get("groups", 0.0)) for h in history)
    drops: dict[str, int] = {}
    for h in history:
        for reason, count in dict(h.get("dropped_groups", {})).items():
            drops[reason] = drops.get(reason, 0) + int(count)
    stale = drops.get("window_advanced", 0) + drops.get("stale_version", 0)
    return {
        "trained_groups": trained_groups,
        "stale_drops": stale,
        "drops": drops,
        "stale_drops_per_trained_group": stale / trained_groups if trained_groups else None,
        "samples_per_s": samples / seconds if seconds > 0 else None,
        "admissions_held": sum(int(h.get("admissions_held", 0)) for h in history),
        "admission_wait_s": round(
            sum(float(h.get("admission_wait_seconds", 0)) for h in history), 2
        ),
        "reward_last_10": (
            sum(float(h["reward"]) for h in history[-10:]) / len(history[-10:]) if history else None
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="steps per run (default 40)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting (default 2)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "admission.json"
    )
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (step 1 is excluded from throughput)")
    print(f"admission control: examples/local-tiny.yaml, {args.steps} steps, {args.repeats} x")
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="dressage-admission-") as tmp:
        for repeat in range(args.repeats):
            for label, admission in SETTINGS:
                result = run_job(job_for(label, admission, repeat), Path(tmp), steps=args.steps)
                if not result.ok:
                    print(f"admission {label} run {repeat} failed (exit {result.returncode}):")
                    print(result.output_tail)
                    return 1
                figures = measure(result.history)
                figures["wall_seconds"] = round(result.wall_seconds, 1)
                runs[label].append(figures)
                print(
                    f"  admission {label:<3} run {repeat}: {figures['stale_drops']} stale drops "
                    f"for {figures['trained_groups']:.0f} trained groups, "
                    f"{fmt(figures['samples_per_s'], 1)} samples/s, "
                    f"{figures['admissions_held']} held"
                )
    summary = {
        label: {
            key: median([r[key] for r in runs[label] if r[key] is not None])
            for key in ("stale_drops_per_trained_group", "samples_per_s", "admissions_held")
        }
        for label, _ in SETTINGS
    }
    off, on = summary["off"], summary["on"]
    ratio = (
        on["samples_per_s"] / off["samples_per_s"]
        if on["samples_per_s"] and off["samples_per_s"]
        else None
    )
    print()
    print(f"{'admission':<10} {'stale drops / trained group':>28} {'samples/s':>10} {'held':>6}")
    for label, _ in SETTINGS:
        s = summary[label]
        print(
            f"{label:<10} {fmt(s['stale_drops_per_trained_group'], 3):>28} "
            f"{fmt(s['samples_per_s'], 1):>10} {fmt(s['admissions_held'], 0):>6}"
        )
    print(f"throughput on/off: {fmt(ratio, 2)}x")
    write_result(
        args.out,
        {
            "benchmark": "admission",
            "job": "examples/local-tiny.yaml",
            "steps": args.steps,
            "repeats": args.repeats,
            "summary": summary,
            "throughput_on_over_off": ratio,
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
