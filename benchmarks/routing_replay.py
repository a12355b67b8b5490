"""MoE routing replay (R3) on and off, side by side, on the tiny MoE.

The job is `examples/local-moe.yaml`: the tiny Qwen3-MoE (2 layers of 8 experts, top-2) on the
arithmetic task, warm start cached, the embedded engine returning every token's routed experts
and the proxy recording them. Two scenarios in which the trainer's router can disagree with
the rollout's:

- `stale`: fully asynchronous rollout, trainer and engine in float32: batches hold groups the
  previous weights generated, and the trainer's router, at newer weights, sends some tokens to
  other experts than the rollout did;
- `bf16`: synchronous rollout (every batch from the current weights) with the trainer computing
  in bfloat16 (`training.precision: bf16`) and the engine in float32, as a GPU trainer against
  another engine's kernels: the same weights, other rounding, and routes near a tie flip.

Each scenario runs two arms: `record` (replay off: the trainer routes with its own router, the
routes are still recorded so that the agreement is measured) and `replay`. Every (scenario,
arm) pair runs `--repeats` times with training seeds 0, 1, ..., the arms interleaved (record,
replay, record, replay, ...) so that the machine's load falls on both alike. Per run: the mean
over its steps of `train_rollout_logprob_abs_diff`, `routing_agreement` (the share of
rollout-routed (token, MoE layer) pairs whose top-k set the trainer's router picks too),
`mismatch_kl_k3`, the mean reward of the last steps and the seconds per step; the table shows
the medians over the repeats, each arm beside the other, and writes every run's figures to
`benchmarks/results/routing_replay.json` (`routing_replay_quick.json` with `--quick`), with
the machine's load average around each run.

    python benchmarks/routing_replay.py [--steps 30] [--repeats 3] [--scenarios stale,bf16]
        [--quick]

`--quick` (6 steps, 2 repeats, both scenarios: 8 runs) takes about 10 minutes on a loaded
2-core machine; the default about 40.
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
    step_seconds,
    write_result,
)

JOB = ROOT / "examples" / "local-moe.yaml"
ARMS = ("record", "replay")
FINAL_WINDOW = 5
"""Last steps averaged into the final reward."""


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    overrides: dict[str, Any]


SCENARIOS = {
    s.key: s
    for s in (
        Scenario("stale", "fully_async, fp32 trainer", {"rollout": {"mode": "fully_async"}}),
        Scenario(
            "bf16",
            "sync, bf16 trainer vs fp32 engine",
            {"rollout": {"mode": "sync"}, "training": {"precision": "bf16"}},
        ),
    )
}
QUICK = {"steps": 6, "repeats": 2}


def job_for(scenario: Scenario, arm: str, seed: int) -> dict[str, Any]:
    spec = merged(
        scenario.overrides,
        {"rollout": {"routingReplay": arm}, "training": {"seed": seed}},
    )
    name = f"r3-{scenario.key}-{arm}-s{seed}"
    return merged(base_job(JOB), {"metadata": {"name": name}, "spec": spec})


def run_figures(history: list[dict[str, Any]]) -> dict[str, Any]:
    def series(key: str) -> list[float]:
        return [float(h[key]) for h in history if key in h]

    rewards = series("reward")
    return {
        "steps": len(history),
        "logprob_diff_mean": mean(series("train_rollout_logprob_abs_diff")),
        "routing_agreement_mean": mean(series("routing_agreement")),
        "routed_token_fraction_mean": mean(series("routed_token_fraction")),
        "mismatch_kl_k3_mean": mean(series("mismatch_kl_k3")),
        "final_reward": mean(rewards[-FINAL_WINDOW:]),
        "seconds_per_step": (
            round(sum(step_seconds(h) for h in history) / len(history), 3) if history else None
        ),
        "logprob_diffs": series("train_rollout_logprob_abs_diff"),
        "routing_agreements": series("routing_agreement"),
        "rewards": rewards,
    }


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def values(key: str) -> list[float]:
        return [float(r[key]) for r in runs if r.get(key) is not None]

    return {
        key: median(values(key))
        for key in (
            "logprob_diff_mean",
            "routing_agreement_mean",
            "routed_token_fraction_mean",
            "mismatch_kl_k3_mean",
            "final_reward",
            "seconds_per_step",
        )
    } | {"runs_ok": sum(1 for r in runs if r["status"] == "ok"), "runs": len(runs)}


def table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    head = (
        f"{'scenario':<36} {'arm':<7} {'|train-rollout| logprob':>24} {'routing agreement':>18} "
        f"{'k3 KL':>9} {'final reward':>13} {'s/step':>7} {'runs':>5}"
    )
    lines = [head, "-" * len(head)]
    for key, arms in results.items():
        for arm in ARMS:
            runs = arms.get(arm) or []
            if not runs:
                continue
            agg = aggregate(runs)
            lines.append(
                f"{SCENARIOS[key].label:<36} {arm:<7} {fmt(agg['logprob_diff_mean'], 5):>24} "
                f"{fmt(agg['routing_agreement_mean'], 4):>18} "
                f"{fmt(agg['mismatch_kl_k3_mean'], 5):>9} {fmt(agg['final_reward']):>13} "
                f"{fmt(agg['seconds_per_step'], 2):>7} {agg['runs_ok']:>3}/{agg['runs']}"
            )
        record, replay = arms.get("record"), arms.get("replay")
        if record and replay:
            off, on = aggregate(record)["logprob_diff_mean"], aggregate(replay)["logprob_diff_mean"]
            if off and on is not None:
                lines.append(f"{'':<36} replay / record logprob diff: {on / off:.3f}")
    return "\n".join(lines)


def write(
    args: argparse.Namespace,
    results: dict[str, dict[str, list[dict[str, Any]]]],
    elapsed: float,
    *,
    complete: bool,
) -> None:
    payload = {
        "benchmark": "routing_replay",
        "job": str(JOB.relative_to(ROOT)),
        "complete": complete,
        "quick": args.quick,
        "steps": args.steps,
        "repeats": args.repeats,
        "final_window": FINAL_WINDOW,
        "wall_seconds": round(elapsed, 1),
        "scenarios": {
            key: {
                "label": SCENARIOS[key].label,
                "overrides": SCENARIOS[key].overrides,
                "arms": {
                    arm: {"median": aggregate(runs), "runs": runs} for arm, runs in arms.items()
                },
            }
            for key, arms in results.items()
        },
    }
    write_result(args.out, payload, announce=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--quick", action="store_true", help="6 steps, 2 repeats")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = QUICK["steps"], QUICK["repeats"]
    keys = [k.strip() for k in args.scenarios.split(",") if k.strip()]
    unknown = [k for k in keys if k not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    if args.out is None:
        name = "routing_replay_quick.json" if args.quick else "routing_replay.json"
        args.out = ROOT / "benchmarks" / "results" / name
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="routing-replay-"))
    results: dict[str, dict[str, list[dict[str, Any]]]] = {k: {a: [] for a in ARMS} for k in keys}
    started = time.monotonic()
    for seed in range(args.repeats):
        for key in keys:
            for arm in ARMS:
                job = job_for(SCENARIOS[key], arm, seed)
                load_before = load_average()
                run = run_job(job, workdir / key, steps=args.steps, timeout_s=args.timeout)
                figures = run_figures(run.history)
                status = "ok" if run.ok and len(run.history) == args.steps else "failed"
                if run.timed_out:
                    status = "timed out"
                figures |= {
                    "seed": seed,
                    "status": status,
                    "wall_seconds": round(run.wall_seconds, 1),
                    "load_before": load_before,
                    "load_after": load_average(),
                }
                if status != "ok":
                    figures["output_tail"] = run.output_tail
                results[key][arm].append(figures)
                print(
                    f"{key:<6} {arm:<7} seed {seed}: {status}, "
                    f"logprob diff {fmt(figures['logprob_diff_mean'], 5)}, "
                    f"agreement {fmt(figures['routing_agreement_mean'], 4)}, "
                    f"reward {fmt(figures['final_reward'])} "
                    f"({run.wall_seconds:.0f} s, load {load_before})",
                    flush=True,
                )
                write(args, results, time.monotonic() - started, complete=False)
    elapsed = time.monotonic() - started
    write(args, results, elapsed, complete=True)
    print()
    print(f"routing replay, {args.steps} steps x {args.repeats} repeats (medians over repeats):")
    print(table(results))
    print(f"\nwrote {args.out.relative_to(ROOT)} ({elapsed / 60:.1f} min)")
    failed = sum(
        1
        for arms in results.values()
        for runs in arms.values()
        for r in runs
        if r["status"] != "ok"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
