"""What held-out evaluation costs training: the trainer's wait fraction, step time and trained
samples per second with evaluation off and on at several engine shares, side by side.

Evaluation shares the engines with training: `evaluation.maxConcurrency` bounds its prompt
groups in flight beside training's, and a publish waits for the evaluations in flight, so that
every evaluated token comes from the version the evaluation names (docs/evaluation.md). What
that costs shows in the trainer's time: waiting for a batch (the engines serve evaluation too)
and publishing (waiting for the evaluation to end).

The job is `examples/local-heldout.yaml` as the time-to-quality benchmark runs its `auto`
setting (engine and proxy on core 0, the trainer on core 1, the rollout process on the
trainer's core), evaluated every `--every-steps` steps (and at `v0` and the final version) on
its 48 held-out prompts, greedy. Settings: `off` (no `spec.evaluation`) and `cN` for each N of
`--concurrency` (`evaluation.maxConcurrency` N; the example's own is 4). Rounds are interleaved
(round r runs every setting once, in order), so every setting meets the same minutes of the
machine's load.

Figures per run, over every step: the trainer's wait fraction (the share of step wall time
spent not training: waiting for the batch plus publishing), its two parts, the mean step
seconds, trained samples per second of step wall time, and the evaluations' count and median
seconds. Per setting, the median over rounds, and samples per second as a ratio to `off`'s of
the same round (its median over rounds).

    python benchmarks/eval_cost.py [--steps 60] [--every-steps 10] [--rounds 3]
        [--concurrency 1,4,16] [--quick] [--out PATH]

With the defaults: 12 runs of 60 steps, about 10 minutes on two idle cores; `--quick` (off and
c4, 1 round, 4 steps) about a minute.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import (
    ROOT,
    base_job,
    evaluations_of,
    fmt,
    load_average,
    median,
    merged,
    run_job,
    step_seconds,
    write_result,
)
from time_to_quality import ASYNC_PLACEMENT, JOB, placement_of

RESULTS = ROOT / "benchmarks" / "results" / "eval_cost.json"
QUICK_RESULTS = ROOT / "benchmarks" / "results" / "eval_cost_quick.json"
OFF = "off"


def setting_names(concurrency: list[int]) -> list[str]:
    return [OFF, *(f"c{c}" for c in concurrency)]


def job_for(setting: str, round_: int, *, steps: int, every_steps: int) -> dict[str, Any]:
    """The example job for `setting` (`off` or `cN`), as this benchmark runs it."""
    spec: dict[str, Any] = merged(placement_of(ASYNC_PLACEMENT), {"training": {"steps": steps}})
    if setting == OFF:
        spec["evaluation"] = None  # merged() deletes the example's evaluation block
    else:
        share = int(setting.removeprefix("c"))
        spec["evaluation"] = {"everySteps": every_steps, "maxConcurrency": share}
    name = f"evalcost-{setting}-r{round_}"
    return merged(base_job(JOB), {"metadata": {"name": name}, "spec": spec})


def run_figures(history: list[dict[str, Any]], evaluations: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's figures over all its steps (module docstring)."""
    total = sum(step_seconds(h) for h in history)
    waited = sum(float(h.get("rollout_seconds", 0.0)) for h in history)
    published = sum(float(h.get("publish_seconds", 0.0)) for h in history)
    samples = sum(float(h.get("samples", 0.0)) for h in history)
    eval_seconds = [float(e["seconds"]) for e in evaluations if "seconds" in e]

    def share(part: float) -> float | None:
        return part / total if total > 0 else None

    return {
        "steps": len(history),
        "step_seconds_mean": total / len(history) if history else None,
        "wait_fraction": share(waited + published),
        "batch_wait_fraction": share(waited),
        "publish_fraction": share(published),
        "samples_per_s": samples / total if total > 0 else None,
        "evaluations": len(evaluations),
        "eval_seconds_median": median(eval_seconds),
    }


FIGURES = (
    "wait_fraction",
    "batch_wait_fraction",
    "publish_fraction",
    "step_seconds_mean",
    "samples_per_s",
    "eval_seconds_median",
)


def summarise(runs: list[dict[str, Any]], settings: list[str]) -> dict[str, dict[str, Any]]:
    """Per setting, the median of each figure over its finished runs, and trained samples per
    second as a ratio to `off`'s in the same round (the median of those ratios)."""
    ok = [r for r in runs if r["status"] == "ok"]
    off_rate = {r["round"]: r["samples_per_s"] for r in ok if r["setting"] == OFF}
    summary: dict[str, dict[str, Any]] = {}
    for setting in settings:
        mine = [r for r in ok if r["setting"] == setting]
        row: dict[str, Any] = {"runs": len(mine)}
        for key in FIGURES:
            row[key] = median([r[key] for r in mine if r[key] is not None])
        row["samples_per_s_vs_off"] = median(
            [
                r["samples_per_s"] / off_rate[r["round"]]
                for r in mine
                if r["samples_per_s"] and off_rate.get(r["round"])
            ]
        )
        summary[setting] = row
    return summary


def render(summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| setting | trainer wait | batch wait | publish | step s | samples/s | vs off | eval s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for setting, row in summary.items():
        lines.append(
            f"| {setting} | {fmt(row['wait_fraction'], 2)} | {fmt(row['batch_wait_fraction'], 2)}"
            f" | {fmt(row['publish_fraction'], 2)} | {fmt(row['step_seconds_mean'], 3)}"
            f" | {fmt(row['samples_per_s'], 1)} | {fmt(row['samples_per_s_vs_off'], 2)}"
            f" | {fmt(row['eval_seconds_median'], 1)} |"
        )
    return "\n".join(lines)


def run_one(setting: str, round_: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One `dressage run` of `setting` in round `round_`: its figures, load and status."""
    job = job_for(setting, round_, steps=args.steps, every_steps=args.every_steps)
    load_before = load_average()
    result = run_job(job, tmp, steps=args.steps, timeout_s=args.run_timeout)
    evaluations = evaluations_of(tmp, job["metadata"]["name"])
    figures = run_figures(result.history, evaluations)
    # A run without evaluation must have written none; one with it, at least one.
    ok = result.ok and bool(evaluations) == (setting != OFF)
    figures.update(
        setting=setting,
        round=round_,
        run_seconds=round(result.wall_seconds, 1),
        load_before=load_before,
        load_after=load_average(),
        status="ok" if ok else f"failed at step {len(result.history)}",
    )
    if not ok:
        figures["output_tail"] = result.output_tail
    print(
        f"round {round_} {setting:>4}: wait {fmt(figures['wait_fraction'], 2)}"
        f"  step {fmt(figures['step_seconds_mean'], 3)} s"
        f"  {fmt(figures['samples_per_s'], 1)} samples/s"
        f"  {figures['evaluations']} evals  {figures['status']}",
        flush=True,
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every-steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--run-timeout", type=float, default=600.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    concurrency = [int(c) for c in args.concurrency.split(",") if c]
    if args.quick:
        args.steps, args.every_steps, args.rounds, concurrency = 4, 2, 1, [4]
    settings = setting_names(concurrency)
    out = args.out or (QUICK_RESULTS if args.quick else RESULTS)
    started = datetime.now(UTC)
    runs: list[dict[str, Any]] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="eval-cost-") as tmp:
        for round_ in range(args.rounds):
            for setting in settings:
                runs.append(run_one(setting, round_, args, Path(tmp)))
                results = {
                    "benchmark": "eval_cost",
                    "date": started.strftime("%Y-%m-%d"),
                    "started": started.isoformat(timespec="seconds"),
                    "job": str(JOB.relative_to(ROOT)),
                    "steps": args.steps,
                    "every_steps": args.every_steps,
                    "rounds": args.rounds,
                    "settings": settings,
                    "load": [
                        min(r["load_before"] for r in runs),
                        max(r["load_after"] for r in runs),
                    ],
                    "summary": summarise(runs, settings),
                    "runs": runs,
                }
                write_result(out, results, announce=False)  # a stopped run keeps what it had
    write_result(out, results)
    print(render(results["summary"]))
    print(f"load {results['load'][0]}-{results['load'][1]}; results in {out}")
    failed = [r for r in runs if r["status"] != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
