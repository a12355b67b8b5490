"""Staleness controls in a regime where staleness hurts: data several versions behind the
trainer, and updates large enough for that to matter.

The multi-turn agent job of the ablation (`examples/local-household.yaml`: the whitebox agent
opens numbered boxes and takes the object it was asked for, partial async rollout) pushed
into a stress regime (`REGIME`): many groups in flight against small batches, so completed
groups wait several trainer steps in the buffer (the uncontrolled baseline's mean version lag
is the figure to check: >= 4 versions), and a learning rate above the example's, so each
version moves the policy far enough that a sample generated a few versions back is off-policy
(the logprob gap and the mismatch KL show by how much). Five settings:

- baseline: `keepVersions` 0, no preempt limit, no correction;
- `keepVersions` 2 (admission control off: the filter drops what is already stale);
- `keepVersions` 2 + admission (the worker starts no group the window would reject);
- partial rollout with `maxPartialRolloutPreempts` 2;
- the baseline with token-level truncated importance sampling (`tis`, clip 2).

Seeds are interleaved (seed 0 of every setting, then seed 1, ...), so every setting sees the
machine's load at about the same times, and the controls are compared with the baseline seed
by seed (`benchmarks/_stress_report.py`: figures, bootstrap intervals, table, plot). Writes
`benchmarks/results/staleness_stress.json` (after every run, so a stopped benchmark keeps what
it measured), `staleness_stress.md` (the tables) and `staleness_stress.png` (the plot).

`--quick` is the suite's smoke test: two settings, a few steps, and the model warmed to 0.2
instead of the job's 0.45 (`QUICK_WARM_START`).

    python benchmarks/staleness_stress.py [--steps 20] [--seeds 5] [--threshold 0.6] [--quick]
    python benchmarks/staleness_stress.py --render benchmarks/results/staleness_stress.json
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

from _runs import ROOT, base_job, fmt, load_average, merged, run_job, status_of, write_result
from _stress_report import (
    build_rows,
    plot_results,
    render_markdown,
    seed_figures,
    update_readme,
)

JOB = ROOT / "examples" / "local-household.yaml"


@dataclass(frozen=True)
class Setting:
    key: str
    label: str
    overrides: dict[str, Any]


REGIME: dict[str, Any] = {
    "rollout": {"mode": "partial_async", "concurrency": 48, "batchSize": 4},
    "training": {"learningRate": 0.0006, "maxTokensPerMicroBatch": 192},
    "proxy": {"maxConcurrency": 1024},
}
"""48 groups in flight against batches of 4 groups, and as many completed groups queued for
the trainer: twelve batches ahead, so a completed group waits several steps before it is
trained. Micro-batches of at most 192 tokens (two or three samples; the gradient is the same,
accumulated) slow the trainer's step so that the engine, not the trainer, stays ahead and the
queue stays full. A learning rate of 6e-4, twice the example's 3e-4, so each version moves the
policy far enough that a sample a few versions old is off-policy. The proxy's admission limit is
raised above the 384 requests in flight, so the regime is not one of 429 retries."""
OFF = {"keepVersions": 0, "maxPartialRolloutPreempts": None}
KV2 = {"keepVersions": 2, "maxPartialRolloutPreempts": None}
TIS = {"offPolicyCorrection": {"mode": "tis", "tisClip": 2.0}}
SETTINGS = (
    Setting("baseline", "no control", {"staleness": OFF}),
    Setting("kv2", "keepVersions 2", {"staleness": {**KV2, "admission": False}}),
    Setting("kv2-adm", "keepVersions 2 + admission", {"staleness": {**KV2, "admission": True}}),
    Setting(
        "preempts2",
        "preempts 2",
        {"staleness": {"keepVersions": 0, "maxPartialRolloutPreempts": 2}},
    ),
    Setting("tis", "baseline + TIS", {"staleness": OFF, "training": TIS}),
)
KEYS = tuple(s.key for s in SETTINGS)
DEFAULTS = {"steps": 20, "seeds": 5, "threshold": 0.6}
QUICK = {"steps": 4, "seeds": 2, "threshold": 0.6, "settings": "baseline,kv2-adm"}
QUICK_WARM_START = {"targetReward": 0.2}
"""The smoke test's warm start (`--quick`): the job's own 0.45 takes one to three minutes to
reach on two cores the first time (it is cached after: `~/.cache/dressage/warmstart`), which a
fresh machine's test run would spend on a run of a few steps; 0.2 takes seconds."""


def job_for(setting: Setting, seed: int, *, quick: bool = False) -> dict[str, Any]:
    spec = merged(merged(REGIME, setting.overrides), {"training": {"seed": seed}})
    if quick:
        spec = merged(spec, {"model": {"warmStart": QUICK_WARM_START}})
    name = f"stress-{setting.key}-s{seed}"
    return merged(base_job(JOB), {"metadata": {"name": name}, "spec": spec})


def run_order(seeds: int, settings: int) -> list[tuple[int, int]]:
    """The (seed, setting index) pairs in the order they run: seeds outermost, so every setting
    meets the machine's load of the same minutes and a drift in load spreads over all of them."""
    return [(seed, index) for seed in range(seeds) for index in range(settings)]


def results_of(
    args: argparse.Namespace,
    settings: list[Setting],
    per_setting: list[list[dict[str, Any]]],
    elapsed: float,
    loads: list[float],
    *,
    complete: bool,
) -> dict[str, Any]:
    return {
        "benchmark": "staleness_stress",
        "job": str(JOB.relative_to(ROOT)),
        "regime": REGIME,
        "complete": complete,
        "quick": args.quick,
        "warm_start": job_for(settings[0], 0, quick=args.quick)["spec"]["model"]["warmStart"],
        "threshold": args.threshold,
        "steps": args.steps,
        "seeds": args.seeds,
        "wall_seconds": round(elapsed, 1),
        "load_average": {"min": min(loads, default=None), "max": max(loads, default=None)},
        "settings": [
            {"key": s.key, "label": s.label, "overrides": s.overrides, "seeds": seeds}
            for s, seeds in zip(settings, per_setting, strict=True)
        ],
    }


README = ROOT / "docs" / "benchmarks.md"


def report(results: dict[str, Any], out: Path, *, readme: bool = False) -> None:
    """Print the tables and write them (`.md`) and the plot (`.png`) next to `out`; with
    `readme`, also into the generated block of `docs/benchmarks.md`."""
    rows = build_rows(results)
    text = render_markdown(results, rows)
    print()
    print(text)
    out.with_suffix(".md").write_text(text)
    if readme:
        shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
        update_readme(
            README, text + f"\nResults: `{shown}`; plot: `{shown.with_suffix('.png')}`.\n"
        )
    if len(results["settings"]) > 1 and all(s["seeds"] for s in results["settings"]):
        plot_results(results, out.with_suffix(".png"))
        print(f"wrote {out.with_suffix('.png')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 20)")
    parser.add_argument("--seeds", type=int, default=None, help="training seeds (default 5)")
    parser.add_argument("--threshold", type=float, default=None, help="reward threshold")
    parser.add_argument("--settings", default=None, help=f"subset of {', '.join(KEYS)}")
    parser.add_argument("--quick", action="store_true", help=f"smoke test: {QUICK}")
    parser.add_argument("--run-timeout", type=float, default=420.0, help="seconds per run")
    parser.add_argument("--render", type=Path, default=None, help="re-render a results JSON")
    parser.add_argument("--out", type=Path, default=None, help="results JSON path")
    parser.add_argument(
        "--update-readme", action="store_true", help="rewrite the block in docs/benchmarks.md"
    )
    args = parser.parse_args()
    if args.render is not None:
        report(json.loads(args.render.read_text()), args.render, readme=args.update_readme)
        return 0
    defaults = {**DEFAULTS, "settings": ",".join(KEYS)}
    if args.quick:
        defaults = QUICK
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.out is None:
        stem = "staleness_stress_quick" if args.quick else "staleness_stress"
        args.out = ROOT / "benchmarks" / "results" / f"{stem}.json"
    if args.steps < 1 or args.seeds < 1:
        parser.error("--steps and --seeds must be >= 1")
    chosen = [k for k in args.settings.split(",") if k]
    unknown = sorted(set(chosen) - set(KEYS))
    if unknown or not chosen or chosen[0] != "baseline":
        parser.error(f"--settings: start with baseline; unknown {unknown}; known {KEYS}")
    settings = [s for s in SETTINGS if s.key in chosen]

    print(
        f"staleness stress: {JOB.relative_to(ROOT)}, {args.steps} steps x {args.seeds} seed(s) "
        f"x {len(settings)} setting(s), load {load_average()}"
    )
    started = time.monotonic()
    loads: list[float] = []
    per_setting: list[list[dict[str, Any]]] = [[] for _ in settings]
    with tempfile.TemporaryDirectory(prefix="dressage-stress-") as tmp:
        for seed, index in run_order(args.seeds, len(settings)):
            setting = settings[index]
            load_before = load_average()
            job = job_for(setting, seed, quick=args.quick)
            result = run_job(job, Path(tmp), steps=args.steps, timeout_s=args.run_timeout)
            figures = seed_figures(result.history, args.threshold)
            figures.update(
                seed=seed,
                wall_seconds=round(result.wall_seconds, 1),
                load_before=load_before,
                load_after=load_average(),
                status=status_of(result.ok, result.timed_out, len(result.history)),
            )
            if figures["status"] != "ok":
                figures["output_tail"] = result.output_tail
            loads += [load_before, figures["load_after"]]
            per_setting[index].append(figures)
            partial = results_of(
                args, settings, per_setting, time.monotonic() - started, loads, complete=False
            )
            write_result(args.out, partial, announce=False)
            print(
                f"  {setting.label} seed {seed}: {figures['status']}, final reward "
                f"{fmt(figures['final_reward'])}, to threshold "
                f"{figures['steps_to_threshold']}, lp diff "
                f"{fmt(figures['logprob_diff_mean'], 4)}, lag {fmt(figures['lag_mean'], 2)}"
                f"/{fmt(figures['lag_max'], 0)}, drops {figures['dropped_groups']}, "
                f"{result.wall_seconds:.0f} s, load {load_before}->{figures['load_after']}",
                flush=True,
            )
    results = results_of(
        args, settings, per_setting, time.monotonic() - started, loads, complete=True
    )
    write_result(args.out, results)
    report(results, args.out, readme=args.update_readme)
    print(f"total wall time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
