"""A local run's figures as a results file: what the README and `docs/local-run.md` quote.

    bash scripts/run-local.sh --fresh             # the run (examples/local-tiny.yaml)
    python benchmarks/learning_run.py runs/local-tiny --date 2026-12-07 \\
        --load 1.4-12.6 --setup-seconds 106 --run-seconds 344

reads the run directory's `report.json` (every step's figures, written by `dressage run`) and
writes `benchmarks/results/<job>.json`: the mean reward and train/rollout logprob gap over
windows of 10 steps, drops, admissions held, the version lag, the seconds the steps took, and
what the run directory cannot know, given as flags: the date, the machine's load average
while it ran, and the wall time of the setup and of the whole `dressage run` (warm start and
engine start included). The pages quote these figures under a marker that
`tests/unit/test_quoted_figures.py` checks against this file.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 10
MIDDLE_STARTS = (40, 90)


def window_means(steps: list[dict[str, Any]], key: str) -> dict[str, float]:
    """The mean of `key` over windows of `WINDOW` steps: the first, the last, and those from
    steps 41 and 91 where they end before the last begins (the windows the pages have quoted:
    1-10, 41-50, 91-100, 141-150 for 150 steps), keyed `first-last` by step number."""
    n = len(steps)
    if n < WINDOW:
        raise ValueError(f"{n} steps: at least {WINDOW} are needed for a window")
    middle = (s for s in MIDDLE_STARTS if s + WINDOW <= n - WINDOW)
    starts = sorted({0, *middle, n - WINDOW})
    out = {}
    for start in starts:
        chunk = steps[start : start + WINDOW]
        out[f"{start + 1}-{start + len(chunk)}"] = round(
            statistics.fmean(float(s[key]) for s in chunk), 4
        )
    return out


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The figures of one run from its `report.json`."""
    steps = report["steps"]
    summary = report["summary"]
    return {
        "job": report["job"]["name"],
        "mode": report["job"]["mode"],
        "steps": len(steps),
        "mean_reward": window_means(steps, "reward"),
        "logprob_abs_diff": window_means(steps, "train_rollout_logprob_abs_diff"),
        "dropped_groups": sum(summary["dropped_groups"].values()),
        "staleness_failures": summary["staleness_failures"],
        "admissions_held": summary["admissions_held"],
        "budget_exceeded_steps": summary.get("budget_exceeded_steps", 0),
        "version_lag_mean": round(summary["staleness/version_lag_mean"], 3),
        "version_lag_max": summary["staleness/version_lag_max"],
        "step_seconds_total": round(summary["step_seconds"], 1),
    }


def _load(text: str) -> dict[str, float]:
    low, _, high = text.partition("-")
    return {"min": float(low), "max": float(high or low)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory (runs/local-tiny)")
    parser.add_argument("--date", required=True, help="the run's date, YYYY-MM-DD (UTC)")
    parser.add_argument("--load", required=True, help="load average while it ran, MIN-MAX")
    parser.add_argument("--setup-seconds", type=float, help="scripts/setup-run.sh's wall time")
    parser.add_argument("--run-seconds", type=float, help="`dressage run`'s wall time")
    parser.add_argument("--example", default="examples/local-tiny.yaml", help="its manifest")
    parser.add_argument("--out", type=Path, default=None, help="results JSON path")
    args = parser.parse_args(argv)
    report = json.loads((args.run_dir / "report.json").read_text())
    results = {
        "benchmark": "learning_run",
        "example": args.example,
        "date": args.date,
        "machine": {"cpus": 2},
        "load_average": _load(args.load),
        "setup_seconds": args.setup_seconds,
        "run_seconds": args.run_seconds,
        **summarize(report),
    }
    out = args.out or ROOT / "benchmarks" / "results" / f"{results['job']}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
