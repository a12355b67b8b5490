"""Trained-sample throughput of `fully_async` rollout against `sync` rollout, and how much of the
possible overlap async rollout gets.

Two jobs, each run with `rollout.mode` `sync` and then `fully_async` (concurrency 16, one batch
ahead), alternating, `--repeats` times, one run after the other so they never share the CPU:

- `main`: the README's learning job (`examples/local-tiny.yaml`) as it is, every process free
  to run on any core. Its rollout takes far longer than its training, so even perfect overlap
  gains little.
- `balanced`: the same job in a placement that models separate accelerators, where async RL
  pays off. The embedded engine is paced (`spec.local.engineMinStepIntervalMs`: a decode step
  costs wall time, little CPU); the engine and the proxy are pinned to core 0 (`engineCpus`),
  the trainer to core 1 (`trainerCpus`); the trainer's micro-batches are small
  (`training.maxTokensPerMicroBatch`) so that a step trains about as long as it rolls out. It
  runs twice: with rollout orchestration in a process of its own (`rollout.separateProcess`,
  placement `separate`; the runner puts that process on core 1 in sync runs, where the trainer
  waits for its batch, and on core 0 in async runs, where the trainer trains meanwhile) and
  inside the trainer's process (placement `inline`, where the rollout worker and the trainer
  share one interpreter lock and core 1).

Throughput is trained samples per second of step wall time (rollout wait + train + publish,
from the run's history), excluding process startup, the warm start and step 1. Each pair of
runs gives the speedup async/sync and the **overlap efficiency**: speedup / ideal, where
ideal = (T_rollout + T_train) / max(T_rollout, T_train) from the sync run's own median phase
times (T_train includes publishing: the trainer's side of a step). The machine's load average
is recorded around every run: on a shared machine other processes take the core that sync
leaves idle while it trains, so async figures there are lower bounds.

Besides each placement's async/sync, the summary compares best against best: each job's
fastest async placement against its fastest sync placement (what a user choosing the best
setting for each mode gets), and names the placement a sync job should use.

    python benchmarks/async_speedup.py [--quick] [--jobs main,balanced] [--steps 12]
        [--repeats 1] [--placements separate,inline] [--pace-ms 100]
        [--micro-batch-tokens 16] [--out PATH]

The defaults (6 runs) take about 10 minutes on an idle 2-core machine, `--quick` (the
balanced job, 4 steps: 4 runs) a few minutes.
GPU-cluster figures (AReaL 2.77x, verl 2.35-2.67x) are printed for context only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import (
    ROOT,
    base_job,
    fmt,
    load_average,
    median,
    merged,
    run_job,
    step_seconds,
    write_result,
)

MODES = ("sync", "fully_async")
JOBS = ("main", "balanced")
PLACEMENTS = {"main": ("any",), "balanced": ("separate", "inline")}
ANCHORS = "AReaL reports 2.77x and verl 2.35-2.67x (GPU clusters, large models)"
TICKS = os.sysconf("SC_CLK_TCK")
TARGETS = {"overlap_efficiency": 0.85, "async_over_sync": 1.6}
QUICK_STEPS = 4


def job_for(
    job: str, placement: str, mode: str, repeat: int, *, pace_ms: float, micro_batch: int
) -> dict[str, Any]:
    name = f"speedup-{job}-{placement}-{mode.replace('_', '-')}-{repeat}"
    rollout: dict[str, Any] = {"mode": mode}
    if mode != "sync":
        rollout["concurrency"] = 16  # one batch of groups in flight ahead of the trainer
    # The window by hand, as measured before the example stated a budget (`mode: auto`).
    staleness = {"mode": None, "budget": None, "keepVersions": 2}
    spec: dict[str, Any] = {"rollout": rollout, "staleness": staleness}
    if job == "balanced":
        rollout["separateProcess"] = placement == "separate"
        spec["training"] = {"maxTokensPerMicroBatch": micro_batch}
        # The rollout process is placed by the runner's default: on the trainer's core in
        # sync runs (idle while it waits for the batch), on the engine's in async runs.
        spec["local"] = {
            "engineMinStepIntervalMs": pace_ms,
            "engineCpus": [0],
            "trainerCpus": [1],
        }
    return merged(base_job(), {"metadata": {"name": name}, "spec": spec})


def measure(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Throughput and phase figures of one run, from its history (step 1 excluded)."""
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
        "median_publish_s": median([float(h.get("publish_seconds", 0.0)) for h in steady]),
        "final_reward": history[-1].get("reward") if history else None,
        "dropped_groups": sum(sum(h.get("dropped_groups", {}).values()) for h in history),
    }


class SchedWatch:
    """Polls the `dressage run` process (the trainer) for the CPU time its threads got and the
    time they waited, runnable, for a core (`/proc/PID/task/*/schedstat`), per finished step.

    On a machine shared with other work, a trainer that waits for a core in async runs and not
    in sync runs is slowed by that work, not by its own rollout."""

    def __init__(self, history: Path, interval_s: float = 0.25) -> None:
        self.history = history
        self.interval_s = interval_s
        self.samples: list[tuple[int, float, float]] = []
        """(steps finished, CPU seconds, run-queue wait seconds)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, process: subprocess.Popen[bytes]) -> None:
        self._thread = threading.Thread(target=self._poll, args=(process.pid,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _poll(self, pid: int) -> None:
        wait = 0.0
        last_waits: dict[str, float] = {}
        while not self._stop.is_set():
            try:
                tids = os.listdir(f"/proc/{pid}/task")
                # utime + stime of the whole process, ended threads included.
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return  # the run ended
            cpu = (int(stat[11]) + int(stat[12])) / TICKS
            waits: dict[str, float] = {}
            for tid in tids:
                try:
                    fields = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
                except OSError:
                    continue  # a thread that just ended
                waits[tid] = int(fields[1]) / 1e9
            # Each thread's wait since the previous poll: threads that end take their totals
            # with them, so summing the live threads' totals would go down.
            wait += sum(w - last_waits.get(tid, 0.0) for tid, w in waits.items())
            last_waits = waits
            steps = 0
            if self.history.exists():
                steps = sum(1 for line in self.history.read_text().splitlines() if line.strip())
            self.samples.append((steps, cpu, wait))
            self._stop.wait(self.interval_s)

    def per_step(self) -> dict[str, float | None]:
        """CPU and run-queue wait seconds per step, from the end of step 1 to the last step."""
        steady = [s for s in self.samples if s[0] >= 1]
        if len(steady) < 2 or steady[-1][0] == steady[0][0]:
            return {"trainer_cpu_s_per_step": None, "trainer_runqueue_wait_s_per_step": None}
        (s0, c0, w0), (s1, c1, w1) = steady[0], steady[-1]
        return {
            "trainer_cpu_s_per_step": round((c1 - c0) / (s1 - s0), 3),
            "trainer_runqueue_wait_s_per_step": round((w1 - w0) / (s1 - s0), 3),
        }


def ideal_speedup(sync: dict[str, Any]) -> float | None:
    """(T_rollout + T_train) / max(T_rollout, T_train) from a sync run's median phase times."""
    rollout = sync["median_rollout_wait_s"]
    train = sync["median_train_s"] + sync["median_publish_s"]
    longest = max(rollout, train)
    return (rollout + train) / longest if longest > 0 else None


def pair_figures(sync: dict[str, Any], fully_async: dict[str, Any]) -> dict[str, Any]:
    """Speedup, ideal and overlap efficiency of one sync run and the async run after it."""
    speedup = (
        fully_async["samples_per_s"] / sync["samples_per_s"]
        if sync["samples_per_s"] and fully_async["samples_per_s"]
        else None
    )
    ideal = ideal_speedup(sync)
    return {
        "async_over_sync": speedup,
        "ideal": ideal,
        "overlap_efficiency": speedup / ideal if speedup is not None and ideal else None,
        "rollout_over_train": (
            sync["median_rollout_wait_s"] / (sync["median_train_s"] + sync["median_publish_s"])
            if sync["median_train_s"]
            else None
        ),
    }


def best_against_best(summary: dict[str, Any]) -> dict[str, Any]:
    """Per job: its best sync placement against its best async placement, by median trained
    samples per second. A per-placement ratio flatters async when its own sync baseline is not
    the best sync a user could run; this one compares what each mode does at its best."""
    out: dict[str, Any] = {}
    for job in JOBS:
        keys = [key for key in summary if key.split("/")[0] == job]
        best: dict[str, tuple[str, float]] = {}
        for mode in MODES:
            rated = [(k, summary[k][mode]["samples_per_s"]) for k in keys]
            rated = [(k, v) for k, v in rated if v is not None]
            if rated:
                key, value = max(rated, key=lambda kv: kv[1])
                best[mode] = (key.split("/")[1], value)
        if len(best) == len(MODES):
            (sync_at, sync_rate), (async_at, async_rate) = best["sync"], best["fully_async"]
            out[job] = {
                "sync_placement": sync_at,
                "sync_samples_per_s": sync_rate,
                "async_placement": async_at,
                "async_samples_per_s": async_rate,
                "async_over_sync": async_rate / sync_rate if sync_rate else None,
            }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke test: the balanced job, {QUICK_STEPS} steps, 1 repeat (unless given)",
    )
    parser.add_argument("--jobs", default=None, help="main, balanced or both (default both)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 12)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode (default 1)")
    parser.add_argument(
        "--pace-ms", type=float, default=100.0, help="balanced job: engine decode step pacing"
    )
    parser.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=16,
        help="balanced job: training.maxTokensPerMicroBatch (smaller trains longer)",
    )
    parser.add_argument(
        "--placements",
        default="separate,inline",
        help="balanced job: separate (rollout process of its own), inline, or both",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "async_speedup.json",
        help="where to write the JSON results",
    )
    args = parser.parse_args()
    if args.jobs is None:
        args.jobs = "balanced" if args.quick else ",".join(JOBS)
    if args.steps is None:
        args.steps = QUICK_STEPS if args.quick else 12
    if args.steps < 2:
        parser.error("--steps must be >= 2 (step 1 is excluded from the figures)")
    jobs = [j for j in args.jobs.split(",") if j]
    if not jobs or any(j not in JOBS for j in jobs):
        parser.error(f"--jobs: a comma-separated subset of {', '.join(JOBS)}")
    placements = [p for p in args.placements.split(",") if p]
    if not placements or any(p not in PLACEMENTS["balanced"] for p in placements):
        parser.error("--placements: a comma-separated subset of separate, inline")
    if "balanced" in jobs and len(os.sched_getaffinity(0)) < 2:
        parser.error("the balanced job pins engine and trainer to cores 0 and 1: needs 2 cores")

    print(f"async speedup: {', '.join(jobs)}; {args.steps} steps, {args.repeats} repeat(s)")
    print(f"context: {ANCHORS}; here {os.cpu_count()} CPU cores, load {load_average()}")
    cases = [
        (job, placement)
        for job in jobs
        for placement in (placements if job == "balanced" else PLACEMENTS[job])
    ]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        f"{j}/{p}": {m: [] for m in MODES} for j, p in cases
    }
    pairs: dict[str, list[dict[str, Any]]] = {f"{j}/{p}": [] for j, p in cases}
    with tempfile.TemporaryDirectory(prefix="dressage-speedup-") as tmp:
        for repeat in range(args.repeats):
            for job, placement in cases:
                key = f"{job}/{placement}"
                for mode in MODES:
                    spec = job_for(
                        job,
                        placement,
                        mode,
                        repeat,
                        pace_ms=args.pace_ms,
                        micro_batch=args.micro_batch_tokens,
                    )
                    load_before = load_average()
                    name = spec["metadata"]["name"]
                    watch = SchedWatch(Path(tmp) / name / "history.jsonl")
                    try:
                        result = run_job(spec, Path(tmp), steps=args.steps, on_start=watch.start)
                    finally:
                        watch.stop()
                    if not result.ok:
                        print(f"{key} {mode} run {repeat} failed (exit {result.returncode}):")
                        print(result.output_tail)
                        return 1
                    figures = measure(result.history)
                    figures["wall_seconds"] = round(result.wall_seconds, 1)
                    figures["load_before"] = load_before
                    figures["load_after"] = load_average()
                    figures.update(watch.per_step())
                    figures["history"] = result.history
                    runs[key][mode].append(figures)
                    print(
                        f"  {key:<19} {mode:<12} run {repeat}: "
                        f"{fmt(figures['samples_per_s'], 1)} samples/s, "
                        f"rollout wait {fmt(figures['median_rollout_wait_s'], 2)} s, "
                        f"train {fmt(figures['median_train_s'], 2)} s, "
                        f"trainer cpu/wait per step {fmt(figures['trainer_cpu_s_per_step'], 2)}/"
                        f"{fmt(figures['trainer_runqueue_wait_s_per_step'], 2)} s, "
                        f"load {load_before}->{figures['load_after']}"
                    )
                pair = pair_figures(runs[key]["sync"][-1], runs[key]["fully_async"][-1])
                pairs[key].append(pair)
                print(
                    f"  {key:<19} pair {repeat}: async/sync {fmt(pair['async_over_sync'], 2)}x, "
                    f"ideal {fmt(pair['ideal'], 2)}x, "
                    f"efficiency {fmt(pair['overlap_efficiency'], 2)}"
                )

    summary: dict[str, Any] = {}
    for key in runs:
        entry: dict[str, Any] = {}
        for mode in MODES:
            rs = runs[key][mode]
            entry[mode] = {
                "samples_per_s": median([r["samples_per_s"] for r in rs]),
                "median_step_s": median([r["median_step_s"] for r in rs]),
                "median_rollout_wait_s": median([r["median_rollout_wait_s"] for r in rs]),
                "median_train_s": median([r["median_train_s"] for r in rs]),
                "median_publish_s": median([r["median_publish_s"] for r in rs]),
                "trainer_cpu_s_per_step": median(
                    [r["trainer_cpu_s_per_step"] for r in rs if r["trainer_cpu_s_per_step"]]
                ),
                "trainer_runqueue_wait_s_per_step": median(
                    [
                        r["trainer_runqueue_wait_s_per_step"]
                        for r in rs
                        if r["trainer_runqueue_wait_s_per_step"] is not None
                    ]
                ),
            }
        for figure in ("async_over_sync", "ideal", "overlap_efficiency", "rollout_over_train"):
            entry[figure] = median([p[figure] for p in pairs[key] if p[figure] is not None])
        loads = [r[k] for m in MODES for r in runs[key][m] for k in ("load_before", "load_after")]
        entry["load_average"] = {"min": min(loads), "median": median(loads), "max": max(loads)}
        summary[key] = entry

    print()
    print(
        f"{'job/placement':<19} {'sync/s':>8} {'async/s':>8} {'async/sync':>10} {'ideal':>6} "
        f"{'efficiency':>10} {'R/T':>5} {'load':>5}"
    )
    for key, s in summary.items():
        print(
            f"{key:<19} {fmt(s['sync']['samples_per_s'], 1):>8} "
            f"{fmt(s['fully_async']['samples_per_s'], 1):>8} "
            f"{fmt(s['async_over_sync'], 2):>9}x {fmt(s['ideal'], 2):>5}x "
            f"{fmt(s['overlap_efficiency'], 2):>10} {fmt(s['rollout_over_train'], 2):>5} "
            f"{fmt(s['load_average']['median'], 1):>5}"
        )
    best = best_against_best(summary)
    for job, b in best.items():
        print(
            f"{job}, best against best: async ({b['async_placement']}) "
            f"{fmt(b['async_samples_per_s'], 1)} / sync ({b['sync_placement']}) "
            f"{fmt(b['sync_samples_per_s'], 1)} samples/s = {fmt(b['async_over_sync'], 2)}x; "
            f"a sync job is fastest with placement {b['sync_placement']}"
        )
    print(
        f"targets (balanced/separate): efficiency >= {TARGETS['overlap_efficiency']}, "
        f"async/sync >= {TARGETS['async_over_sync']}x; anchors: {ANCHORS}"
    )

    write_result(
        args.out,
        {
            "benchmark": "async_speedup",
            "job": "examples/local-tiny.yaml",
            "quick": args.quick,
            "steps": args.steps,
            "repeats": args.repeats,
            "balanced": {
                "engine_min_step_interval_ms": args.pace_ms,
                "max_tokens_per_micro_batch": args.micro_batch_tokens,
                "engine_proxy_rollout_cpus": [0],
                "trainer_cpus": [1],
            },
            "machine": {"cpus": os.cpu_count()},
            "targets": TARGETS,
            "summary": summary,
            "best_against_best": best,
            "pairs": pairs,
            "anchors": {"AReaL": 2.77, "verl": [2.35, 2.67]},
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
