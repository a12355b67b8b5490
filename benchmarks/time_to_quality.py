"""Time to quality: held-out pass@1 against wall-clock and against steps, sync against fully
async without staleness control against `staleness.mode: auto`, over seeds, with intervals.

The job is `examples/local-heldout.yaml`: two-digit addition whose held-out operand pairs are
never trained on (docs/evaluation.md), evaluated every `--every-steps` steps (and at `v0` and the
final version) on the same `--prompts` held-out prompts, greedy pass@1. Every setting pins the
engine and the proxy to core 0 and the trainer to core 1 (the placement that models separate
accelerators, as `benchmarks/long_tail.py`). Three settings:

- `sync`: `rollout.mode: sync` in its best placement: before the seeds, a short search runs
  sync `--search-steps` steps in each placement a user could pick (`separate`, the rollout
  process on the engine's core; `trainer-core`, on the trainer's core; `inline`, in the
  trainer's process; `unpinned`, nothing pinned) and keeps the one with the shortest median step
  (`--sync-placement` names one and skips the search);
- `async`: `fully_async` with no staleness control: `staleness.keepVersions: 0`, admission off,
  `rollout.concurrency` `ASYNC_DEPTH` groups in flight against batches of 16, so completed
  groups queue several steps ahead of the trainer (the mean version lag of its trained samples
  is the figure to check: 4 or more);
- `auto`: the example's own `staleness.mode: auto` with a lag budget of 1 version.

The async settings run their rollout process on the trainer's core (`long_tail.py`'s async
placement). Every run trains `--steps` steps; seeds are interleaved (seed 0 of every setting,
then seed 1, ...), so every setting meets the machine's load of the same minutes. Figures
(`benchmarks/_ttq_report.py`, with 90 % bootstrap intervals across seeds): the wall-clock to
reach 95 % of sync's final held-out pass@1 and its ratio to sync's, the pass@1 held after a
fixed wall-clock budget (`--budget-seconds`, by default 0.6x sync's mean wall-clock), the final
pass@1 and its difference against sync, the mean version lag. Writes
`benchmarks/results/time_to_quality.json` (after every run, so a stopped benchmark keeps what
it measured), `.md` (the table) and `.png` (the plot) beside it.

    python benchmarks/time_to_quality.py [--steps 300] [--seeds 5] [--every-steps 25] [--quick]
        [--sync-placement P] [--budget-seconds S] [--out PATH] [--update-readme]
    python benchmarks/time_to_quality.py --render benchmarks/results/time_to_quality.json

With the defaults: the placement search (4 runs of 10 steps, 2 minutes) and 15 runs of 300
steps on two cores, sync and auto about 2.5 minutes each and the uncontrolled async run 4-6
(2026-12-07: 54 minutes in all at a load of 1.4-3.8); `--quick` (3 settings,
1 seed, 4 steps) about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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
    merged,
    run_job,
    status_of,
    write_result,
)
from _stress_report import update_readme
from _ttq_report import BEGIN, END, build_rows, plot_results, render_markdown, seed_figures

JOB = ROOT / "examples" / "local-heldout.yaml"
README = ROOT / "docs" / "benchmarks.md"
ASYNC_DEPTH = 160
"""Groups in flight without staleness control: ten batches of 16 ahead of the trainer, which
puts the trained data 4 or more versions behind on average (96 in flight gave 3.45)."""
PINNED = {"engineCpus": [0], "trainerCpus": [1]}
PLACEMENTS = ("separate", "trainer-core", "inline", "unpinned")
ASYNC_PLACEMENT = "trainer-core"


@dataclass(frozen=True)
class Setting:
    key: str
    label: str
    overrides: dict[str, Any]


NO_CONTROL = {
    "mode": None,
    "budget": None,
    "keepVersions": 0,
    "admission": False,
    "maxPartialRolloutPreempts": None,
}
SETTINGS = (
    Setting(
        "sync",
        "sync (best placement)",
        {"rollout": {"mode": "sync"}, "staleness": {"mode": None, "budget": None}},
    ),
    Setting(
        "async",
        "fully async, no staleness control",
        {
            "rollout": {"mode": "fully_async", "concurrency": ASYNC_DEPTH},
            "staleness": NO_CONTROL,
            "proxy": {"maxConcurrency": 2048},
        },
    ),
    Setting("auto", "staleness.mode: auto", {"rollout": {"mode": "fully_async"}}),
)
KEYS = tuple(s.key for s in SETTINGS)
DEFAULTS = {"steps": 300, "seeds": 5, "every_steps": 25}
QUICK = {"steps": 4, "seeds": 1, "every_steps": 2}


def placement_of(placement: str) -> dict[str, Any]:
    """The `spec` overrides of a rollout placement (`PLACEMENTS`)."""
    if placement == "unpinned":
        return {"local": {"engineCpus": None, "trainerCpus": None, "rolloutCpus": None}}
    if placement == "inline":
        return {"rollout": {"separateProcess": False}, "local": PINNED}
    cpus = PINNED["engineCpus"] if placement == "separate" else PINNED["trainerCpus"]
    return {"rollout": {"separateProcess": True}, "local": {**PINNED, "rolloutCpus": cpus}}


def job_for(
    setting: Setting, seed: int, *, placement: str, steps: int, every_steps: int, name: str = ""
) -> dict[str, Any]:
    spec = merged(placement_of(placement), setting.overrides)
    spec = merged(
        spec,
        {"training": {"seed": seed, "steps": steps}, "evaluation": {"everySteps": every_steps}},
    )
    name = name or f"ttq-{setting.key}-s{seed}"
    return merged(base_job(JOB), {"metadata": {"name": name}, "spec": spec})


def run_order(seeds: int, settings: int) -> list[tuple[int, int]]:
    """(seed, setting index) in the order they run: seeds outermost (`staleness_stress`)."""
    return [(seed, index) for seed in range(seeds) for index in range(settings)]


def revision() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        )
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
    except OSError:
        return "unknown"
    return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"


def search_sync(args: argparse.Namespace, tmp: Path) -> tuple[str, dict[str, float | None]]:
    """The sync placement with the shortest median step over `--search-steps` steps."""
    medians: dict[str, float | None] = {}
    for placement in PLACEMENTS:
        job = job_for(
            SETTINGS[0],
            0,
            placement=placement,
            steps=args.search_steps,
            every_steps=args.search_steps,
            name=f"ttq-search-{placement}",
        )
        result = run_job(job, tmp, steps=args.search_steps, timeout_s=args.run_timeout)
        steps = [float(h["step_seconds"]) for h in result.history[1:] if "step_seconds" in h]
        medians[placement] = statistics.median(steps) if result.ok and steps else None
        print(f"  sync search {placement}: median step {fmt(medians[placement])} s", flush=True)
    timed = {p: m for p, m in medians.items() if m is not None}
    if not timed:
        raise SystemExit("sync placement search: no placement finished a run")
    return min(timed, key=lambda p: timed[p]), medians


def run_one(
    setting: Setting, seed: int, placement: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    job = job_for(
        setting, seed, placement=placement, steps=args.steps, every_steps=args.every_steps
    )
    load_before = load_average()
    result = run_job(job, tmp, steps=args.steps, timeout_s=args.run_timeout)
    evaluations = evaluations_of(tmp, job["metadata"]["name"])
    figures = seed_figures(evaluations, result.history)
    ok = result.ok and bool(evaluations)
    figures.update(
        seed=seed,
        placement=placement,
        run_seconds=round(result.wall_seconds, 1),
        load_before=load_before,
        load_after=load_average(),
        status=status_of(ok, result.timed_out, len(result.history)),
    )
    if not ok:
        figures["output_tail"] = result.output_tail
    return figures


def results_of(
    args: argparse.Namespace,
    settings: list[Setting],
    per_setting: list[list[dict[str, Any]]],
    extra: dict[str, Any],
    *,
    complete: bool,
) -> dict[str, Any]:
    loads = [s[k] for seeds in per_setting for s in seeds for k in ("load_before", "load_after")]
    results = {
        "benchmark": "time_to_quality",
        "job": str(JOB.relative_to(ROOT)),
        "complete": complete,
        "quick": args.quick,
        "steps": args.steps,
        "seeds": args.seeds,
        "every_steps": args.every_steps,
        "prompts": base_job(JOB)["spec"]["evaluation"]["prompts"],
        "budget_seconds": args.budget_seconds,
        "async_depth": ASYNC_DEPTH,
        "async_placement": ASYNC_PLACEMENT,
        "load_average": {"min": min(loads, default=None), "max": max(loads, default=None)},
        **extra,
        "settings": [
            {"key": s.key, "label": s.label, "overrides": s.overrides, "seeds": seeds}
            for s, seeds in zip(settings, per_setting, strict=True)
        ],
    }
    return with_rows(results) if complete else results


def with_rows(results: dict[str, Any]) -> dict[str, Any]:
    """`results` with the figures of its table (`build_rows`) under `rows`, by setting key, so
    the pages quoting them can be checked against the file."""
    return {**results, "rows": {row["key"]: row for row in build_rows(results)}}


def report(results: dict[str, Any], out: Path, *, readme: bool = False) -> None:
    """Print the table and write it (`.md`) and the plot (`.png`) next to `out`; with
    `readme`, also into the generated block of `docs/benchmarks.md`."""
    text = render_markdown(results, build_rows(results))
    print()
    print(text)
    out.with_suffix(".md").write_text(text)
    if readme:
        shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
        block = text + f"\nResults: `{shown}`; plot: `{shown.with_suffix('.png')}`.\n"
        update_readme(README, block, begin=BEGIN, end=END)
    if all(s["seeds"] for s in results["settings"]):
        plot_results(results, out.with_suffix(".png"))
        print(f"wrote {out.with_suffix('.png')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 300)")
    parser.add_argument("--seeds", type=int, default=None, help="training seeds (default 5)")
    parser.add_argument("--every-steps", type=int, default=None, help="evaluation interval (25)")
    parser.add_argument("--settings", default=None, help=f"subset of {', '.join(KEYS)}")
    parser.add_argument("--quick", action="store_true", help=f"smoke test: {QUICK}")
    parser.add_argument("--sync-placement", choices=PLACEMENTS, default=None)
    parser.add_argument("--search-steps", type=int, default=10, help="steps per placement tried")
    parser.add_argument("--budget-seconds", type=float, default=None, help="wall-clock budget")
    parser.add_argument("--run-timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--render", type=Path, default=None, help="re-render a results JSON")
    parser.add_argument("--out", type=Path, default=None, help="results JSON path")
    parser.add_argument(
        "--update-readme", action="store_true", help="rewrite the block in docs/benchmarks.md"
    )
    args = parser.parse_args()
    if args.render is not None:
        rendered = json.loads(args.render.read_text())
        if rendered.get("complete"):
            rendered = with_rows(rendered)
            write_result(args.render, rendered, announce=False)
        report(rendered, args.render, readme=args.update_readme)
        return 0
    for name, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.settings = args.settings or ",".join(KEYS)
    if args.quick and args.sync_placement is None:
        args.sync_placement = "separate"
    if args.out is None:
        stem = "time_to_quality_quick" if args.quick else "time_to_quality"
        args.out = ROOT / "benchmarks" / "results" / f"{stem}.json"
    if min(args.steps, args.seeds, args.every_steps, args.search_steps) < 1:
        parser.error("--steps, --seeds, --every-steps and --search-steps must be >= 1")
    chosen = [k for k in args.settings.split(",") if k]
    unknown = sorted(set(chosen) - set(KEYS))
    if unknown or not chosen or chosen[0] != "sync":
        parser.error(f"--settings: start with sync; unknown {unknown}; known {KEYS}")
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("the job pins engine and trainer to cores 0 and 1: needs 2 cores")
    settings = [s for s in SETTINGS if s.key in chosen]

    started = time.monotonic()
    extra: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "revision": revision(),
        "load_at_start": load_average(),
    }
    print(
        f"time to quality: {JOB.relative_to(ROOT)}, {args.steps} steps x {args.seeds} seed(s) x "
        f"{len(settings)} setting(s), evaluation every {args.every_steps}, load "
        f"{extra['load_at_start']}",
        flush=True,
    )
    per_setting: list[list[dict[str, Any]]] = [[] for _ in settings]
    with tempfile.TemporaryDirectory(prefix="dressage-ttq-") as tmp:
        if args.sync_placement is None:
            extra["sync_placement"], extra["sync_search"] = search_sync(args, Path(tmp))
        else:
            extra["sync_placement"], extra["sync_search"] = args.sync_placement, None
        for seed, index in run_order(args.seeds, len(settings)):
            setting = settings[index]
            placement = extra["sync_placement"] if setting.key == "sync" else ASYNC_PLACEMENT
            figures = run_one(setting, seed, placement, args, Path(tmp))
            per_setting[index].append(figures)
            extra["wall_seconds"] = round(time.monotonic() - started, 1)
            write_result(
                args.out,
                results_of(args, settings, per_setting, extra, complete=False),
                announce=False,
            )
            print(
                f"  {setting.label} seed {seed}: {figures['status']}, pass@1 "
                f"{fmt(figures['initial_pass1'])} -> {fmt(figures['final_pass1'])} (best "
                f"{fmt(figures['best_pass1'])}), {fmt(figures['wall_seconds'], 0)} s of training,"
                f" lag {fmt(figures['lag_mean'], 2)}/{fmt(figures['lag_max'], 0)}, drops "
                f"{figures['dropped_groups']}, load {figures['load_before']}->"
                f"{figures['load_after']}",
                flush=True,
            )
    extra["wall_seconds"] = round(time.monotonic() - started, 1)
    extra["load_at_end"] = load_average()
    results = results_of(args, settings, per_setting, extra, complete=True)
    write_result(args.out, results)
    report(results, args.out, readme=args.update_readme)
    failed = [s for seeds in per_setting for s in seeds if s["status"] != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
