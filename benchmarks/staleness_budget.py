"""The staleness budget's automatic mode against a sweep of fixed settings: trained samples per
second and the version lag each one trains at, on the balanced and the long-tail jobs.

A user in `staleness.mode: fixed` picks `rollout.concurrency` (groups in flight) and
`staleness.keepVersions` (the batch-level window) by hand; in `staleness.mode: auto` they state
a budget, here `maxLagVersions: 2` (`--max-lag`), and the job chooses both after every step
(`dressage.rollout.budget`). Per job, one run per setting:

- `cC-kK`: fixed, `concurrency` C x `keepVersions` K over the grid (`--concurrency 8,16,32`,
  `--keep 1,2,3`), admission control on (the spec's default); K <= maxLag + 1 keeps the lag
  within the budget by admission's bound;
- `default`: the spec's defaults, `concurrency` 32 and `keepVersions` 0 (no batch-level
  control: what a user who sets nothing gets in fixed mode);
- `auto`: `staleness.mode: auto` with the budget, `concurrency` 32 as the depth's bound.

The jobs: `balanced` is `benchmarks/async_speedup.py`'s balanced job (the README's learning
job, `fully_async`, the engine paced at 100 ms a decode step on core 0, the trainer on core 1
with small micro-batches so that a step trains about as long as it rolls out, rollout in a
process of its own); `long-tail` is `examples/local-long-tail.yaml` (heavy-tailed response
lengths, `partial_async` with at most 2 preempts, rollout beside the trainer as
`benchmarks/long_tail.py` runs its async settings).

Each run trains past `WARMUP_STEPS` steps, then `--seconds` of step wall time, then it is
stopped like Ctrl-C. Figures per run over the measured steps: trained samples per second of
step wall time, the largest and mean version lag of the trained samples
(`staleness/version_lag_*`) and the steps over budget, groups dropped, and for `auto` the depth
and window it chose at every step. A second round (`--repeats 2`, the default) reruns `auto`,
`default` and the fastest fixed setting within budget of round 0, and the summary takes each
one's median. Verdict per job: `auto` within budget, at least 95 % of the best fixed setting
within budget, and above `default`.

    flock /work/coord/bench.lock python benchmarks/staleness_budget.py [--quick]
        [--jobs balanced,long-tail] [--seconds 12] [--repeats 2] [--out PATH]

About 40 s per run (startup, warm-up and shutdown included): 11 runs per job in round 0 and 3
in round 1, about 20 minutes for both jobs on two idle cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import (
    ROOT,
    RunWatch,
    base_job,
    fmt,
    load_average,
    median,
    merged,
    run_job,
    step_seconds,
    write_result,
)

TINY = ROOT / "examples" / "local-tiny.yaml"
LONG_TAIL = ROOT / "examples" / "local-long-tail.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "staleness_budget.json"
QUICK_RESULTS = ROOT / "benchmarks" / "results" / "staleness_budget_quick.json"
JOBS = ("balanced", "long-tail")
WARMUP_STEPS = 3
"""Steps left out of the rates: the first ones train groups generated before the first publish
and drop their leftovers when the window first moves (`benchmarks/long_tail.py`)."""
MAX_DEPTH = 32
EXIT_INTERRUPTED = 130
TARGET_OF_BEST = 0.95
LAG_MAX = "staleness/version_lag_max"
"""Within budget: every step's trained batch, warm-up included, at most `--max-lag` behind."""
LAG_MEAN = "staleness/version_lag_mean"


def job_base(job: str) -> dict[str, Any]:
    """The job as its benchmark runs it, before the staleness settings."""
    if job == "balanced":
        spec: dict[str, Any] = {
            "rollout": {"mode": "fully_async", "separateProcess": True},
            "training": {"maxTokensPerMicroBatch": 16},
            "local": {"engineMinStepIntervalMs": 100.0, "engineCpus": [0], "trainerCpus": [1]},
        }
        return merged(base_job(TINY), {"spec": spec})
    trainer_cpus = base_job(LONG_TAIL)["spec"]["local"]["trainerCpus"]
    return merged(base_job(LONG_TAIL), {"spec": {"local": {"rolloutCpus": trainer_cpus}}})


def settings_of(concurrency: list[int], keep: list[int]) -> list[str]:
    return [f"c{c}-k{k}" for c in concurrency for k in keep] + ["default", "auto"]


def staleness_of(setting: str, max_lag: int) -> tuple[dict[str, Any], int]:
    """The job's `staleness` overrides and its `rollout.concurrency` for `setting`."""
    if setting == "auto":
        return {
            "mode": "auto",
            "keepVersions": None,
            "admission": None,
            "budget": {"maxLagVersions": max_lag},
        }, MAX_DEPTH
    # Fixed settings leave out whatever the example's own staleness block says (None deletes).
    if setting == "default":
        return {"mode": None, "budget": None, "keepVersions": None, "admission": None}, 32
    c, k = setting.removeprefix("c").split("-k")
    return {"mode": None, "budget": None, "keepVersions": int(k), "admission": True}, int(c)


def job_for(job: str, setting: str, repeat: int, max_lag: int, max_steps: int) -> dict[str, Any]:
    staleness, concurrency = staleness_of(setting, max_lag)
    name = f"budget-{job}-{setting}-{repeat}"
    spec = {
        "staleness": staleness,
        "rollout": {"concurrency": concurrency},
        "training": {"steps": max_steps},
    }
    return merged(job_base(job), {"metadata": {"name": name}, "spec": spec})


def run_figures(history: list[dict[str, Any]], max_lag: int) -> dict[str, Any]:
    steady = history[WARMUP_STEPS:]
    seconds = sum(step_seconds(h) for h in steady)
    samples = sum(float(h.get("samples", 0.0)) for h in steady)
    lag_max = [
        float(h["staleness/version_lag_max"]) for h in history if "staleness/version_lag_max" in h
    ]
    lag_mean = [
        float(h["staleness/version_lag_mean"]) for h in steady if "staleness/version_lag_mean" in h
    ]
    drops = sum(sum(h.get("dropped_groups", {}).values()) for h in steady)
    return {
        "steps": len(history),
        "steps_measured": len(steady),
        "samples_per_s": samples / seconds if seconds > 0 else None,
        "lag_max": max(lag_max) if lag_max else None,
        "lag_mean": sum(lag_mean) / len(lag_mean) if lag_mean else None,
        "steps_over_budget": sum(1 for x in lag_max if x > max_lag),
        "dropped_groups": drops,
        "wait_fraction": median([float(h.get("batch_wait_fraction", 0.0)) for h in steady]),
        "depth": [h.get("staleness/budget_concurrency") for h in history],
        "keep": [h.get("staleness/budget_keep_versions") for h in history],
        "engine_ratio": [h.get("staleness/budget_engine_ratio") for h in history],
    }


def run_one(
    job: str, setting: str, repeat: int, tmp: Path, args: argparse.Namespace
) -> dict[str, Any] | None:
    spec = job_for(job, setting, repeat, args.max_lag, args.max_steps)
    name = spec["metadata"]["name"]
    watch = RunWatch(
        tmp / name, budget_s=args.seconds, max_steps=args.max_steps, warmup_steps=WARMUP_STEPS
    )
    load_before = load_average()
    try:
        result = run_job(
            spec, tmp, steps=args.max_steps, timeout_s=args.seconds + 600, on_start=watch.start
        )
    finally:
        watch.close()
    finished = result.returncode == 0 or (watch.stopped and result.returncode == EXIT_INTERRUPTED)
    if not finished or len(result.history) <= WARMUP_STEPS:
        print(f"{job} {setting} run {repeat} failed (exit {result.returncode}):")
        print(result.output_tail)
        return None
    figures = run_figures(result.history, args.max_lag)
    figures.update(load_before=load_before, load_after=load_average())
    depth = [d for d in figures["depth"] if d is not None]
    print(
        f"  {job:<9} {setting:<8} run {repeat}: {figures['steps']:>3} steps, "
        f"{fmt(figures['samples_per_s'], 1)} samples/s, lag max {fmt(figures['lag_max'], 0)} "
        f"mean {fmt(figures['lag_mean'], 2)}, over budget {figures['steps_over_budget']}, "
        f"drops {figures['dropped_groups']}, wait {fmt(figures['wait_fraction'], 2)}"
        + (f", depth {int(depth[0])}->{int(depth[-1])}" if depth else "")
        + f", load {load_before}->{figures['load_after']}"
    )
    return figures


def summarize(job: str, runs: dict[str, list[dict[str, Any]]], max_lag: int) -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = {}
    for setting, rs in runs.items():
        rates = [r["samples_per_s"] for r in rs if r["samples_per_s"] is not None]
        lag_max = [r["lag_max"] for r in rs if r["lag_max"] is not None]
        table[setting] = {
            "runs": len(rs),
            "samples_per_s": median(rates),
            "samples_per_s_runs": rates,
            "lag_max": max(lag_max) if lag_max else None,
            "lag_mean": median([r["lag_mean"] for r in rs if r["lag_mean"] is not None]),
            "within_budget": all(r["steps_over_budget"] == 0 for r in rs),
            "steps_over_budget": sum(r["steps_over_budget"] for r in rs),
            "dropped_groups": sum(r["dropped_groups"] for r in rs),
            "wait_fraction": median([r["wait_fraction"] for r in rs if r["wait_fraction"]]),
        }
    fixed = {s: t for s, t in table.items() if s.startswith("c") and t["within_budget"]}
    best = max(fixed, key=lambda s: fixed[s]["samples_per_s"] or 0.0) if fixed else None
    auto, default = table.get("auto"), table.get("default")
    verdict: dict[str, Any] = {"best_fixed": best}
    if auto and best:
        verdict["auto_over_best"] = (auto["samples_per_s"] or 0.0) / (
            fixed[best]["samples_per_s"] or 1.0
        )
    if auto and default:
        verdict["auto_over_default"] = (auto["samples_per_s"] or 0.0) / (
            default["samples_per_s"] or 1.0
        )
    verdict["met"] = bool(
        auto
        and auto["within_budget"]
        and verdict.get("auto_over_best", 0.0) >= TARGET_OF_BEST
        and verdict.get("auto_over_default", 0.0) > 1.0
    )
    return {"job": job, "settings": table, "verdict": verdict}


def markdown(results: dict[str, Any]) -> str:
    lines = []
    for job, entry in results["jobs"].items():
        v = entry["verdict"]
        lines.append(
            f"**{job}** (budget: version lag <= {results['max_lag']}; best fixed within budget "
            f"`{v.get('best_fixed')}`; auto {fmt(v.get('auto_over_best'), 3)}x of it, "
            f"{fmt(v.get('auto_over_default'), 3)}x of `default`; target met: {v['met']})"
        )
        lines.append("")
        lines.append("| setting | samples/s | lag max | lag mean | within budget | drops | wait |")
        lines.append("|---|---|---|---|---|---|---|")
        for setting, t in entry["settings"].items():
            lines.append(
                f"| {setting} | {fmt(t['samples_per_s'], 1)} | {fmt(t['lag_max'], 0)} | "
                f"{fmt(t['lag_mean'], 2)} | {'yes' if t['within_budget'] else 'no'} | "
                f"{t['dropped_groups']} | {fmt(t['wait_fraction'], 2)} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: c16 and c32 at k3, 5 s")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--concurrency", default="8,16,32")
    parser.add_argument("--keep", default="1,2,3")
    parser.add_argument("--max-lag", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=None, help="step seconds per run (12)")
    parser.add_argument("--repeats", type=int, default=None, help="1 or 2 (default 2; quick 1)")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.keep = "16,32", "3"
    args.seconds = args.seconds or (5.0 if args.quick else 12.0)
    args.repeats = args.repeats or (1 if args.quick else 2)
    jobs = [j for j in args.jobs.split(",") if j]
    if any(j not in JOBS for j in jobs):
        parser.error(f"--jobs: a comma-separated subset of {', '.join(JOBS)}")
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("the jobs pin engine and trainer to cores 0 and 1: needs 2 cores")
    grid = settings_of(
        [int(c) for c in args.concurrency.split(",")], [int(k) for k in args.keep.split(",")]
    )
    out = args.out or (QUICK_RESULTS if args.quick else RESULTS)
    started = time.monotonic()
    print(
        f"staleness budget: {', '.join(jobs)}; {len(grid)} settings, {args.seconds:.0f} s of "
        f"steps per run; {os.cpu_count()} CPU cores, load {load_average()}"
    )
    results: dict[str, Any] = {
        "benchmark": "staleness_budget",
        "quick": args.quick,
        "max_lag": args.max_lag,
        "seconds_per_run": args.seconds,
        "warmup_steps": WARMUP_STEPS,
        "jobs": {},
        "runs": {},
    }
    with tempfile.TemporaryDirectory(prefix="dressage-budget-") as tmp:
        for job in jobs:
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in grid}
            for setting in grid:
                figures = run_one(job, setting, 0, Path(tmp), args)
                if figures is None:
                    return 1
                runs[setting].append(figures)
            if args.repeats > 1:
                first = summarize(job, runs, args.max_lag)
                again = ["auto", "default", first["verdict"]["best_fixed"]]
                for setting in [s for s in again if s is not None]:
                    figures = run_one(job, setting, 1, Path(tmp), args)
                    if figures is None:
                        return 1
                    runs[setting].append(figures)
            results["jobs"][job] = summarize(job, runs, args.max_lag)
            results["runs"][job] = runs
            write_result(out, results, announce=False)
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    results["load_average_end"] = load_average()
    results["markdown"] = markdown(results)
    write_result(out, results)
    print(results["markdown"])
    return 0 if all(e["verdict"]["met"] for e in results["jobs"].values()) else 2


if __name__ == "__main__":
    raise SystemExit(main())
