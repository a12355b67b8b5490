"""The long-tail regime: with heavy-tailed response lengths, trained-sample throughput of the best
synchronous setup against fully async and partial async rollout, side by side, with the
staleness each one costs.

The job is `examples/local-long-tail.yaml`: the `long_tail` task (arithmetic whose response
lengths are fixed per trajectory and heavy-tailed: a lognormal body with median 8 tokens and
5 % of the responses at 20x the median, `dressage/tasks/long_tail.py`), 16 groups of 8 per
step, in the placement that models separate accelerators: the embedded engine paced
(`engineMinStepIntervalMs: 20`, so a decode step costs wall time, as on a GPU), the engine and
the proxy on core 0, the trainer on core 1, and the rollout where each setting runs fastest
(below). Settings, one run after the other, interleaved over `--repeats` rounds:

- `sync`: the best synchronous setup. Round 0 runs every placement a user could pick
  (`--sync-placements`: `separate`, rollout in a process of its own on the engine's core;
  `trainer-core`, in a process of its own on the trainer's core; `inline`, in the trainer's
  process; `unpinned`, no core pinning) and the later rounds repeat the fastest. Sync starts
  the whole batch at once (`concurrency` 32 >= 16 groups), and the engine's 128 decode slots
  hold all 128 samples, so no other knob makes a sync step shorter than its longest sample.
- `async`, `async+adm`: `fully_async`, 32 groups in flight, batch-level control
  `keepVersions: 3` (`--keep-versions`; as many versions as a partial trajectory may span, so
  a group whose long member used them is not dropped for its short members), admission
  control off / on. A publish aborts in-flight generations and they start again under the new
  weights. The async settings run in `--async-placement` (default `trainer-core`: the rollout
  process beside the trainer, whose core sits half idle while the engine's is the one every
  async setting saturates; `separate` measures them with rollout on the engine's core).
- `partialK`, `partialK+adm` for K in 0, 1, 2: `partial_async` with
  `maxPartialRolloutPreempts: K`: generations interrupted by a publish resume from their
  partial output, and a trajectory may span at most K + 1 versions.
- `partial2+adm+retry`, `partial2+adm+mask`: `partial2+adm` under the span-limit policies that
  keep work (`staleness.spanLimitPolicy`, `docs/staleness.md`): `retry_trajectory` (only the
  refused trajectory runs again) and `mask_old_tokens` (nothing refused; tokens older than the
  newest 3 versions leave the loss).

Each run trains past its warm-up (step 1 for sync, which includes the first forward passes;
steps 1-3 for async, whose first steps train groups generated before the first publish and drop
their leftovers when the staleness window first moves) for `--seconds` of step wall time, then
it is stopped as with Ctrl-C, so every setting gets the same wall clock. Figures per run, over
its steps after the warm-up: trained samples per second of step wall time; the engine's busy
fraction (share of its 128 decode slots that produced a token, the tail's idle time made
visible) and active fraction (share of time it stepped at all), read from the engine's own
counters; median and p99 step time; the trained samples' version-span distribution and share of
multi-version samples; `train_rollout_logprob_abs_diff`; groups dropped and trajectories
refused; the token ledger's accounts per trained token (masked, dropped, refused, aborted, and
the engine's tokens no step record holds), beside the length bias: the mean response length of
the samples generated (the completed groups, trained or dropped after) against those trained,
their ratio, the trained mean against the distribution's, and the long samples (over 64 tokens)
the batch sink dropped, from the step figures `length/generated_mean_tokens`,
`length/trained_mean_tokens` and `dropped_samples_by_length`; the engine tokens generated and
the CPU each process spent per trained sample, and the seconds per step its threads waited for a
core (what other work on the machine took); reward against wall clock. Per setting the medians
over repeats (drops and refusals per run, spans summed). About 35 s per run (startup, warm-up
steps and shutdown included) and 21 runs with the defaults, 12.4 minutes on two idle cores;
`--repeats 3` gives medians of three in about 18. Ten seconds of steps are too few for the
reward to tell settings apart: `--learning-seconds S` then runs the best sync setup and the
fastest async setting once more, S seconds each, for reward curves long enough to compare.

`--job balanced` runs the same settings on `benchmarks/async_speedup.py`'s balanced job
(`JOBS`: answers of at most 4 tokens, a step that trains about as long as it rolls out), where
what the span-limit policies keep must not cost throughput.

`--concurrency N` puts N groups in flight in the async settings instead of 32 (the proxy's
`maxConcurrency` raised to hold them): whether more work in flight keeps the engine busier.

    python benchmarks/long_tail.py [--quick] [--job long-tail] [--repeats 2] [--seconds 10]
        [--settings ...] [--keep-versions 3] [--concurrency 32] [--compare PATH]
        [--learning-seconds S] [--out PATH] [--update-readme]
    python benchmarks/long_tail.py --render PATH [--compare PATH] [--update-readme]

Writes the results JSON, a plot next to it and a Markdown block; `--update-readme` puts that
block into `docs/benchmarks.md` ("The long-tail regime"), so that page and the JSON quote the
same figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import staleness_budget
from _long_tail_figures import run_figures, summarize
from _long_tail_report import plot_results, render_markdown, update_readme
from _runs import (
    ROOT,
    RunWatch,
    base_job,
    engine_utilisation,
    fmt,
    load_average,
    median,
    merged,
    run_job,
    write_result,
)

from dressage.api.job import TaskSpec
from dressage.api.roles import ProxySpec
from dressage.tasks.long_tail import from_spec as long_tail_task

JOB = ROOT / "examples" / "local-long-tail.yaml"
JOBS = ("long-tail", "balanced")
"""`--job`: `long-tail` is `JOB` as it is; `balanced` is `benchmarks/async_speedup.py`'s
balanced job (`examples/local-tiny.yaml`, answers of at most 4 tokens, the engine paced at 100
ms a decode step on core 0, the trainer on core 1 with micro-batches of 16 tokens, so that a
step trains about as long as it rolls out), where the settings must cost nothing."""
RESULTS = ROOT / "benchmarks" / "results" / "long_tail.json"
QUICK_RESULTS = ROOT / "benchmarks" / "results" / "long_tail_quick.json"
README = ROOT / "docs" / "benchmarks.md"
"""The page that quotes the generated block (`--update-readme`)."""
TARGET_SPEEDUP = 2.5
KEEP_VERSIONS = 3
CONCURRENCY = 32
"""Groups in flight of the async settings (`--concurrency`)."""
PROXY_MAX_CONCURRENCY: int = ProxySpec.model_fields["max_concurrency"].default
"""`spec.proxy.maxConcurrency`'s default: a job with more generations in flight raises it."""
ASYNC_WARMUP_STEPS = 3
PLACEMENTS = ("separate", "trainer-core", "inline", "unpinned")
"""Where the rollout runs: `separate`, a process of its own on the engine's core (the job's
`rolloutCpus`); `trainer-core`, a process of its own on the trainer's core; `inline`, in the
trainer's process; `unpinned`, nothing pinned."""
SYNC_PLACEMENTS = PLACEMENTS
ASYNC_PLACEMENT = "trainer-core"
"""The async settings' placement. Side by side (partial, preempts 2 + admission, two runs each
on an idle machine) it trained 65.5 samples/s against 61.9 with rollout on the engine's core,
where the engine's threads waited 0.66 s per step for the core instead of 0.37."""
EXIT_INTERRUPTED = 130
"""`dressage run`'s exit status when stopped by SIGINT (`dressage.runner.cli`)."""


@dataclass(frozen=True)
class Setting:
    """One column of the comparison."""

    key: str
    label: str
    mode: str
    admission: bool | None = None
    preempts: int | None = None
    policy: str | None = None
    """`staleness.spanLimitPolicy` (None: the default, `refuse_group`)."""

    @property
    def warmup_steps(self) -> int:
        """Steps left out of rates and times: the first for sync (it includes warm-up); the
        first three for async, whose first steps train groups generated before the first
        publish and drop their leftovers when the staleness window first moves."""
        return 1 if self.mode == "sync" else ASYNC_WARMUP_STEPS

    @property
    def version_limit(self) -> int:
        """The most versions one trajectory may span under this setting."""
        return 1 if self.preempts is None else self.preempts + 1


SETTINGS = (
    Setting("sync", "sync (best placement)", "sync"),
    Setting("async", "fully async", "fully_async", admission=False),
    Setting("async+adm", "fully async + admission", "fully_async", admission=True),
    *(
        Setting(
            f"partial{k}{'+adm' if adm else ''}",
            f"partial, preempts {k}{' + admission' if adm else ''}",
            "partial_async",
            admission=adm,
            preempts=k,
        )
        for k in (0, 1, 2)
        for adm in (False, True)
    ),
    *(
        Setting(
            f"partial2+adm+{short}",
            f"partial, preempts 2 + admission, {policy}",
            "partial_async",
            admission=True,
            preempts=2,
            policy=policy,
        )
        for short, policy in (("retry", "retry_trajectory"), ("mask", "mask_old_tokens"))
    ),
)
BY_KEY = {s.key: s for s in SETTINGS}


def job_base(job: str = "long-tail") -> dict[str, Any]:
    """The job `job` (one of `JOBS`) before a setting's overrides: the balanced one as
    `benchmarks/staleness_budget.py` builds it, less the example's held-out evaluation (its
    passes are not part of a step)."""
    if job == "balanced":
        return merged(staleness_budget.job_base("balanced"), {"spec": {"evaluation": None}})
    return base_job(JOB)


def job_for(
    setting: Setting,
    placement: str,
    repeat: int,
    *,
    max_steps: int,
    keep_versions: int = KEEP_VERSIONS,
    job: str = "long-tail",
    concurrency: int = CONCURRENCY,
) -> dict[str, Any]:
    """The benchmark job of `setting` in `placement` (one of `PLACEMENTS`) on `job`, with
    `concurrency` groups in flight (the proxy admitting all of their generations)."""
    base = job_base(job)
    name = f"lt-{setting.key.replace('+', '-')}-{placement}-{repeat}"
    partial = setting.mode == "partial_async"
    spec: dict[str, Any] = {
        "rollout": {
            "mode": setting.mode,
            "concurrency": concurrency,
            "separateProcess": placement != "inline",
        },
        "proxy": {"partialRollout": partial},
        "staleness": {
            "keepVersions": keep_versions,
            "admission": bool(setting.admission),
            "maxPartialRolloutPreempts": setting.preempts if partial else None,
            **({"spanLimitPolicy": setting.policy} if setting.policy else {}),
        },
        "training": {"steps": max_steps},
    }
    if job != "long-tail":  # the window and budget by hand, as on the long-tail job
        spec["staleness"] |= {"mode": None, "budget": None}
    in_flight = concurrency * int(base["spec"]["rollout"]["groupSize"])
    if in_flight > PROXY_MAX_CONCURRENCY:
        spec["proxy"]["maxConcurrency"] = in_flight
    if placement == "unpinned":
        spec["local"] = {"engineCpus": None, "trainerCpus": None, "rolloutCpus": None}
    elif placement == "inline":
        spec["local"] = {"rolloutCpus": None}
    elif placement == "trainer-core":
        spec["local"] = {"rolloutCpus": base["spec"]["local"]["trainerCpus"]}
    return merged(base, {"metadata": {"name": name}, "spec": spec})


def stated_mean_length(job: str = "long-tail") -> float | None:
    """E[L] of the job's length distribution, from its exact CDF (None: the balanced job's
    lengths are the policy's)."""
    if job != "long-tail":
        return None
    task = long_tail_task(TaskSpec.model_validate(base_job(JOB)["spec"]["task"]))
    lengths = task.lengths
    return sum(1.0 - lengths.lengths_cdf(k) for k in range(lengths.max_tokens))


def run_setting(
    setting: Setting,
    placement: str,
    repeat: int,
    tmp: Path,
    args: argparse.Namespace,
    *,
    seconds: float | None = None,
) -> dict[str, Any] | None:
    budget = args.seconds if seconds is None else seconds
    max_steps = args.max_steps if seconds is None else 10_000
    spec = job_for(
        setting,
        placement,
        repeat,
        max_steps=max_steps,
        keep_versions=args.keep_versions,
        job=args.job,
        concurrency=args.concurrency,
    )
    name = spec["metadata"]["name"]
    warmup = setting.warmup_steps
    watch = RunWatch(tmp / name, budget_s=budget, max_steps=max_steps, warmup_steps=warmup)
    load_before = load_average()
    try:
        result = run_job(spec, tmp, steps=max_steps, timeout_s=budget + 600, on_start=watch.start)
    finally:
        watch.close()
    finished = result.returncode == 0 or (watch.stopped and result.returncode == EXIT_INTERRUPTED)
    if not finished or len(result.history) <= warmup:
        print(f"{setting.key} ({placement}) run {repeat} failed (exit {result.returncode}):")
        print(result.output_tail)
        return None
    figures = run_figures(
        result.history, engine_utilisation(watch.engine, after_step=warmup), warmup=warmup
    )
    figures.update(
        placement=placement,
        wall_seconds=round(result.wall_seconds, 1),
        load_before=load_before,
        load_after=load_average(),
        history=result.history,
    )
    print(
        f"  {setting.key:<13} {placement:<9} run {repeat}: {figures['steps']:>3} steps, "
        f"{fmt(figures['samples_per_s'], 1)} samples/s, "
        f"step {fmt(figures['median_step_s'], 2)} s (p99 {fmt(figures['p99_step_s'], 2)}), "
        f"engine busy {fmt(figures['engine_busy_fraction'], 2)}, "
        f"multi-version {fmt(figures['multi_version_share'], 3)}, cpu ms/sample "
        + "/".join(
            f"{role} {fmt(figures.get('cpu_ms_per_sample_' + role), 1)}"
            for role in ("engine", "proxy", "rollout", "trainer")
        )
        + ", core wait s/step "
        + "/".join(
            f"{fmt(figures.get('wait_s_per_step_' + role), 2)}"
            for role in ("engine", "proxy", "rollout", "trainer")
        )
        + f", drops {figures['dropped_total']}, load {load_before}->{figures['load_after']}"
        + ", ledger per trained token "
        + " ".join(
            f"{name} {fmt(value, 2)}"
            for name, value in figures["ledger_per_trained_token"].items()
            if value
        )
    )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 repeat, 5 s runs")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (default 2; quick 1)")
    parser.add_argument(
        "--seconds", type=float, default=None, help="step wall time per run (default 10; quick 5)"
    )
    parser.add_argument("--max-steps", type=int, default=200, help="step cap per run")
    parser.add_argument(
        "--job", default="long-tail", choices=JOBS, help="the job (default long-tail; JOBS)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        help=f"groups in flight of the async settings (default {CONCURRENCY})",
    )
    parser.add_argument(
        "--keep-versions",
        type=int,
        default=KEEP_VERSIONS,
        help=f"staleness.keepVersions of the async settings (default {KEEP_VERSIONS})",
    )
    parser.add_argument(
        "--settings", default=",".join(s.key for s in SETTINGS), help="comma-separated keys"
    )
    parser.add_argument(
        "--sync-placements",
        default=None,
        help=f"placements sync searches in round 0 (default {','.join(SYNC_PLACEMENTS)}; "
        "quick: separate)",
    )
    parser.add_argument(
        "--async-placement",
        default=ASYNC_PLACEMENT,
        choices=PLACEMENTS,
        help=f"placement of the async settings (default {ASYNC_PLACEMENT})",
    )
    parser.add_argument(
        "--learning-seconds",
        type=float,
        default=0.0,
        help="then run sync and the fastest async setting once each this long (reward curves)",
    )
    parser.add_argument("--out", type=Path, default=None, help="results JSON")
    parser.add_argument("--render", type=Path, default=None, help="only render this JSON")
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        help="results JSON of another keepVersions to tabulate beside these (a path in the repo)",
    )
    parser.add_argument(
        "--update-readme", action="store_true", help="write the block into docs/benchmarks.md"
    )
    args = parser.parse_args()
    if args.render is not None:
        results = json.loads(args.render.read_text())
        if args.compare is not None:
            results["compare_with"] = _repo_path(args.compare)
            write_result(args.render, results, announce=False)
        return publish(results, args.render, update=args.update_readme)

    args.repeats = args.repeats or (1 if args.quick else 2)
    args.seconds = args.seconds or (5.0 if args.quick else 10.0)
    default_placements = "separate" if args.quick else ",".join(SYNC_PLACEMENTS)
    placements_arg = args.sync_placements or default_placements
    placements = [p for p in placements_arg.split(",") if p]
    keys = [k for k in args.settings.split(",") if k]
    if not keys or any(k not in BY_KEY for k in keys):
        parser.error(f"--settings: a comma-separated subset of {', '.join(BY_KEY)}")
    if any(p not in SYNC_PLACEMENTS for p in placements) or not placements:
        parser.error(f"--sync-placements: a comma-separated subset of {', '.join(SYNC_PLACEMENTS)}")
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("the job pins engine and trainer to cores 0 and 1: needs 2 cores")
    out = args.out or (QUICK_RESULTS if args.quick else RESULTS)

    started = time.monotonic()
    print(
        f"long tail: {', '.join(keys)}; {args.repeats} round(s) of {args.seconds:.0f} s per run; "
        f"{os.cpu_count()} CPU cores, load {load_average()}"
    )
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    search: dict[str, dict[str, Any]] = {}
    best_sync = placements[0]
    with tempfile.TemporaryDirectory(prefix="dressage-long-tail-") as tmp:
        for repeat in range(args.repeats):
            for key in keys:
                setting = BY_KEY[key]
                candidates = [args.async_placement]
                if setting.mode == "sync":
                    candidates = placements if repeat == 0 else [best_sync]
                for placement in candidates:
                    figures = run_setting(setting, placement, repeat, Path(tmp), args)
                    if figures is None:
                        return 1
                    if setting.mode == "sync" and repeat == 0:
                        search[placement] = figures
                    else:
                        runs[key].append(figures)
                if setting.mode == "sync" and repeat == 0:
                    best_sync = max(search, key=lambda p: search[p]["samples_per_s"] or 0.0)
                    runs[key].append(search[best_sync])
                    print(f"  sync: best placement {best_sync}")
        summary = {key: summarize(rs) for key, rs in runs.items()}
        learning: dict[str, dict[str, Any]] = {}
        if args.learning_seconds > 0 and "sync" in summary and len(summary) > 1:
            fastest = max(
                (k for k in summary if k != "sync"),
                key=lambda k: summary[k]["samples_per_s"] or 0.0,
            )
            print(f"learning: sync and {fastest}, {args.learning_seconds:.0f} s each")
            for key, placement in (("sync", best_sync), (fastest, args.async_placement)):
                figures = run_setting(
                    BY_KEY[key], placement, 99, Path(tmp), args, seconds=args.learning_seconds
                )
                if figures is None:
                    return 1
                learning[key] = figures
    elapsed = time.monotonic() - started

    sync_rate = summary.get("sync", {}).get("samples_per_s")
    for key, entry in summary.items():
        rate = entry["samples_per_s"]
        entry["over_best_sync"] = rate / sync_rate if rate and sync_rate else None
        entry["version_limit"] = BY_KEY[key].version_limit
        entry["label"] = BY_KEY[key].label
    loads = [r[k] for rs in runs.values() for r in rs for k in ("load_before", "load_after")]
    results = {
        "benchmark": "long_tail",
        "job": "examples/local-long-tail.yaml" if args.job == "long-tail" else args.job,
        "quick": args.quick,
        "repeats": args.repeats,
        "seconds_per_run": args.seconds,
        "keep_versions": args.keep_versions,
        "concurrency": args.concurrency,
        "target_speedup": TARGET_SPEEDUP,
        "stated_mean_response_tokens": _rounded(stated_mean_length(args.job)),
        "machine": {"cpus": os.cpu_count()},
        "load_average": {"min": min(loads), "median": median(loads), "max": max(loads)},
        "elapsed_s": round(elapsed, 1),
        "best_sync_placement": best_sync if "sync" in runs else None,
        "async_placement": args.async_placement,
        "sync_search": {
            p: {"samples_per_s": f["samples_per_s"], "median_step_s": f["median_step_s"]}
            for p, f in search.items()
        },
        "summary": summary,
        "runs": runs,
        "learning_seconds": args.learning_seconds,
        "learning": learning,
        "compare_with": _repo_path(args.compare) if args.compare is not None else None,
    }
    write_result(out, results, announce=False)
    print(f"wrote {out} ({elapsed / 60:.1f} min)")
    return publish(results, out, update=args.update_readme)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def publish(results: dict[str, Any], path: Path, *, update: bool) -> int:
    """Print the table, write the plot and the Markdown block next to `path`, and put the
    block into `docs/benchmarks.md` when asked."""
    plot = path.with_suffix(".png")
    plot_results(results, plot)
    other = None
    if results.get("compare_with"):
        other = json.loads((ROOT / results["compare_with"]).read_text())
    block = render_markdown(results, _repo_path(plot), compare=other)
    path.with_suffix(".md").write_text(block)
    print(block)
    if update:
        update_readme(README, block)
        print(f"updated {README}")
    return 0


def _repo_path(path: Path) -> str:
    """`path` relative to the repository when it is inside it (what a results file may cite)."""
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


if __name__ == "__main__":
    raise SystemExit(main())
