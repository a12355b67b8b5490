"""Engine churn: what killing, adding and draining engines while a job trains costs it, next to
the same job with a fixed fleet, measured side by side in one invocation.

The job is `examples/local-long-tail.yaml` (partial async, heavy-tailed response lengths, the
embedded engines paced at 20 ms a decode step as on a GPU, engines, proxy and rollout on core
0, the trainer on core 1) with two engines and staleness controls wide enough that no drop or
refusal can hide a token (`keepVersions: 12`, no `maxPartialRolloutPreempts`): every token a
drained engine generated must then reach a trained sample, so any shortfall is a token lost.
For each weight sync (`disk`, and `distributed`: gloo groups between the trainer and each
embedded engine, formed as engines join), one run without churn and one with the schedule
below (`dressage run --churn`, `dressage.runner.fleet`), one after the other:

    kill@4      engine-0 SIGKILLed: a node lost, its turns in flight fail over or are retried
    add@5       engine-2 started on the base weights; routed to once it serves the current ones
    drain@8     engine-1 drained through the proxy (a scale-down, a spot notice), then stopped
    add@9       engine-3
    add@12      engine-4
    drain@14    engine-2

one change at a time (an `add` returns once the engine is routed to, 5-10 s here, so the
last drain lands near step 20), leaving two engines and about 20 steps in which every drained
turn finishes and its group is trained: a long-tail group waits for its longest member and
then for the groups ahead of it, so a drain near the end of a run leaves drained tokens in
groups not trained yet, which would read as lost.

Figures per run: trained samples per second of step wall time (steps after the 3 warm-up
steps), and with churn that over the run without (the ratio); tokens the drains moved
(`dressage_proxy_drained_tokens_total`) against the drained tokens the trained samples hold
(their segment records' `drained_tokens`), and the difference: tokens lost (of which the
proxy counts those whose turn failed after the move, by reason; the rest were in groups
dropped, retried for another member's failure, or not trained by the end); trainer restarts
(the run resumed from a checkpoint, or did not train every step in one process); groups
dropped by reason; failed prompt-group attempts by reason (a killed engine's turns already
holding tokens come back 502 `engine_failed` and their group is retried) and the turns an
engine failure hit in the proxy, by reason; the largest version span of a trained sample;
the time each change took (an `add` until the proxy routes to the engine, i.e. it serves the
current weights; a `drain` until the proxy answered, then the engine's exit).

    python benchmarks/engine_churn.py [--quick] [--steps 40] [--syncs disk,distributed]
        [--churn SCHEDULE] [--out PATH]

`--quick` (the smoke test's): 7 steps, `disk` only, `kill@2,add@3,drain@5`. Writes
`benchmarks/results/engine_churn.json` (`engine_churn_quick.json` with `--quick`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import (
    ROOT,
    base_job,
    fmt,
    load_average,
    merged,
    run_job,
    step_seconds,
    write_result,
)

JOB = ROOT / "examples" / "local-long-tail.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "engine_churn.json"
QUICK_RESULTS = ROOT / "benchmarks" / "results" / "engine_churn_quick.json"
SCHEDULE = "kill@4,add@5,drain@8,add@9,add@12,drain@14"
QUICK_SCHEDULE = "kill@2,add@3,drain@5"
STEPS = 40
QUICK_STEPS = 7
WARMUP_STEPS = 3
"""Left out of rates: partial async's first steps train groups generated before the first
publish (`benchmarks/long_tail.py`)."""
QUICK_WARMUP_STEPS = 1
SYNCS = ("disk", "distributed")
KEEP_VERSIONS = 12
"""Wide enough that no batch-level drop hides a drained token; the proxy's span limit is off."""
SPAN_MAX = "staleness/version_span_max"
RESUMING = "resuming at step "
"""What `dressage run` prints when it resumes from a checkpoint (a trainer restart)."""


def job_for(sync: str, churn: bool) -> dict[str, Any]:
    name = f"churn-{sync}-{'churn' if churn else 'fixed'}"
    return merged(
        base_job(JOB),
        {
            "metadata": {"name": name},
            "spec": {
                "inference": {"replicas": 2, "weightSync": sync},
                "staleness": {"keepVersions": KEEP_VERSIONS, "maxPartialRolloutPreempts": None},
            },
        },
    )


def _summed(history: list[dict[str, Any]], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for record in history:
        for reason, count in dict(record.get(key) or {}).items():
            out[reason] = out.get(reason, 0) + int(count)
    return out


def measure(
    history: list[dict[str, Any]],
    churn: dict[str, Any] | None,
    log: str,
    *,
    steps: int,
    warmup: int,
) -> dict[str, Any]:
    """One run's figures from its history, its `churn.json` (None without churn) and its
    output."""
    steady = history[warmup:]
    seconds = sum(step_seconds(r) for r in steady)
    samples = sum(float(r.get("samples", 0)) for r in steady)
    spans = [float(r[SPAN_MAX]) for r in history if r.get(SPAN_MAX)]
    proxy = (churn or {}).get("proxy") or {}
    moved = int(proxy.get("drained_tokens", 0))
    trained = int(sum(float(r.get("drained_tokens", 0)) for r in history))
    resumed = log.count(RESUMING)
    figures: dict[str, Any] = {
        "steps": len(history),
        "samples_per_s": samples / seconds if seconds > 0 else None,
        "step_seconds_mean": seconds / len(steady) if steady else None,
        "trained_samples": int(sum(float(r.get("samples", 0)) for r in history)),
        "trainer_restarts": resumed + (0 if len(history) == steps else 1),
        "dropped_groups": _summed(history, "dropped_groups"),
        "failed_attempts": _summed(history, "failed_attempts"),
        "staleness_failures": int(sum(int(r.get("staleness_failures", 0)) for r in history)),
        "max_version_span": max(spans) if spans else None,
        "drained_turns": int(proxy.get("drained_turns", 0)),
        "drained_tokens_moved": moved,
        "drained_tokens_trained": trained,
        "drained_samples_trained": int(sum(float(r.get("drained_samples", 0)) for r in history)),
        "drained_tokens_lost": moved - trained,
        "drained_tokens_lost_in_proxy": {
            k: int(v) for k, v in (proxy.get("drained_tokens_lost") or {}).items() if v
        },
        "engine_failed_turns": {
            k: int(v) for k, v in (proxy.get("engine_failed_turns") or {}).items() if v
        },
        "engine_retries": int(proxy.get("engine_retries", 0)),
    }
    if churn is not None:
        figures["events"] = [
            {
                "event": f"{e['action']}@{e['step']}:{e['engine']}",
                "ok": e["ok"],
                "seconds": round(float(e["seconds"]), 2),
                **({"routed_s": e["detail"].get("routed_s")} if e["action"] == "add" else {}),
                **(
                    {"aborted_generations": e["detail"]["answer"].get("aborted_generations")}
                    if e["action"] == "drain" and isinstance(e["detail"].get("answer"), dict)
                    else {}
                ),
            }
            for e in churn.get("events", [])
        ]
        figures["not_carried_out"] = churn.get("not_carried_out", [])
        figures["engines_at_end"] = churn.get("engines_at_end", [])
    return figures


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the smoke test's short run")
    parser.add_argument("--steps", type=int, default=None, help=f"steps per run ({STEPS})")
    parser.add_argument("--syncs", default=None, help="weight syncs, comma-separated")
    parser.add_argument("--churn", default=None, help=f"the schedule ({SCHEDULE})")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    steps = args.steps or (QUICK_STEPS if args.quick else STEPS)
    warmup = QUICK_WARMUP_STEPS if args.quick else WARMUP_STEPS
    schedule = args.churn or (QUICK_SCHEDULE if args.quick else SCHEDULE)
    syncs = tuple(args.syncs.split(",")) if args.syncs else (("disk",) if args.quick else SYNCS)
    out = args.out or (QUICK_RESULTS if args.quick else RESULTS)
    if steps <= warmup:
        parser.error(f"--steps must be more than the {warmup} warm-up steps")
    unknown = [s for s in syncs if s not in SYNCS]
    if unknown:
        parser.error(f"--syncs: {unknown} (known: {', '.join(SYNCS)})")
    print(f"engine churn: {JOB.relative_to(ROOT)}, 2 engines, {steps} steps, churn {schedule}")
    runs: dict[str, dict[str, Any]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dressage-churn-") as tmp:
        for sync in syncs:
            for churn in (False, True):
                job = job_for(sync, churn)
                name = str(job["metadata"]["name"])
                loads.append(load_average())
                result = run_job(
                    job,
                    Path(tmp),
                    steps=steps,
                    timeout_s=1200,
                    extra_args=["--churn", schedule] if churn else None,
                )
                log = (Path(tmp) / f"{name}.log").read_text(errors="replace")
                if not result.ok:
                    print(f"{name} failed (exit {result.returncode}):\n{result.output_tail}")
                    return 1
                churn_file = Path(tmp) / name / "churn.json"
                record = json.loads(churn_file.read_text()) if churn else None
                figures = measure(result.history, record, log, steps=steps, warmup=warmup)
                figures["wall_seconds"] = round(result.wall_seconds, 1)
                runs[name] = figures
                print(
                    f"  {name}: {fmt(figures['samples_per_s'], 1)} samples/s, drained tokens "
                    f"{figures['drained_tokens_moved']} moved / "
                    f"{figures['drained_tokens_trained']} trained, failed attempts "
                    f"{_reasons(figures['failed_attempts'])}, drops "
                    f"{_reasons(figures['dropped_groups'])}, max span "
                    f"{fmt(figures['max_version_span'], 0)}",
                    flush=True,
                )
    loads.append(load_average())
    summary: dict[str, dict[str, Any]] = {}
    for sync in syncs:
        fixed, churned = runs[f"churn-{sync}-fixed"], runs[f"churn-{sync}-churn"]
        ratio = (
            churned["samples_per_s"] / fixed["samples_per_s"]
            if churned["samples_per_s"] and fixed["samples_per_s"]
            else None
        )
        summary[sync] = {
            "samples_per_s_fixed": fixed["samples_per_s"],
            "samples_per_s_churn": churned["samples_per_s"],
            "churn_over_fixed": ratio,
            "drained_turns": churned["drained_turns"],
            "drained_tokens_moved": churned["drained_tokens_moved"],
            "drained_tokens_trained": churned["drained_tokens_trained"],
            "drained_tokens_lost": churned["drained_tokens_lost"],
            "drained_tokens_lost_in_proxy": churned["drained_tokens_lost_in_proxy"],
            "trainer_restarts": churned["trainer_restarts"] + fixed["trainer_restarts"],
            "dropped_groups": churned["dropped_groups"],
            "dropped_groups_fixed": fixed["dropped_groups"],
            "failed_attempts": churned["failed_attempts"],
            "failed_attempts_fixed": fixed["failed_attempts"],
            "engine_failed_turns": churned["engine_failed_turns"],
            "max_version_span": churned["max_version_span"],
            "max_version_span_fixed": fixed["max_version_span"],
        }
    print()
    header = (
        f"{'sync':<12} {'samples/s fixed':>15} {'churn':>7} {'ratio':>6} "
        f"{'drained tokens moved/trained/lost':>34} {'restarts':>8} {'max span':>8}"
    )
    print(header)
    for sync, s in summary.items():
        tokens = (
            f"{s['drained_tokens_moved']}/{s['drained_tokens_trained']}/{s['drained_tokens_lost']}"
        )
        print(
            f"{sync:<12} {fmt(s['samples_per_s_fixed'], 1):>15} "
            f"{fmt(s['samples_per_s_churn'], 1):>7} {fmt(s['churn_over_fixed'], 2):>6} "
            f"{tokens:>34} {s['trainer_restarts']:>8} {fmt(s['max_version_span'], 0):>8}"
        )
        print(
            f"{'':<12} drained tokens lost as their turn then failed: "
            f"{_reasons(s['drained_tokens_lost_in_proxy'])}"
        )
        print(
            f"{'':<12} failed attempts {_reasons(s['failed_attempts'])}; proxy turns hit by an "
            f"engine failure {_reasons(s['engine_failed_turns'])}; drops "
            f"{_reasons(s['dropped_groups'])} (fixed: {_reasons(s['dropped_groups_fixed'])})"
        )
    print(f"load average {min(loads):.1f}-{max(loads):.1f} (2 cores)")
    write_result(
        out,
        {
            "benchmark": "engine_churn",
            "job": str(JOB.relative_to(ROOT)),
            "replicas": 2,
            "steps": steps,
            "warmup_steps": warmup,
            "schedule": schedule,
            "load_average": [min(loads), max(loads)],
            "provisional": max(loads) > 2.5,
            "summary": summary,
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
