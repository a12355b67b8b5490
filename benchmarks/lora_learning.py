"""LoRA against full weights on the learning run: does the adapter learn as much, at what cost?

Runs `examples/local-lora.yaml` (a rank-16 adapter on every projection of the frozen tiny
Llama) and `examples/local-tiny.yaml` (full weights) one after the other with `dressage run`,
the same seeds (`spec.training.seed` 0, 1, ... for `--seeds`, the two settings interleaved per
seed) and the same number of steps (the evaluation of `local-tiny.yaml` is left out: it is not
part of a step and `local-lora.yaml` has none), and reports per setting, as the mean over the
seeds (each seed's figures kept beside it):

- the mean reward of the first and of the last 10 steps and the rise between them;
- the median seconds of a step (waiting for the batch + training + publishing);
- the trainer process's peak resident memory (`VmHWM` of the `dressage run` process, which
  hosts the trainer, read while it runs: the per-rank figure `trainer_memory.py` measures, here
  with the runner's own few hundred MiB included);
- the trainable parameters and the bytes of one published version, read from the safetensors
  headers of the last version the run published (`runs/<job>/weights/<v>`: the adapter alone
  with LoRA, the whole model without);

prints a table and writes `benchmarks/results/lora_learning.json` (date, load average before
and after, git revision). One seed of a 150-step run moves the rise by several hundredths
between seeds, so the comparison is of means over seeds, with each seed's rise listed.

    python benchmarks/lora_learning.py [--steps N] [--seeds 3] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python benchmarks/lora_learning.py`
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import base_job, fmt, load_average, merged, run_job, step_seconds, write_result  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "lora_learning.json"
SETTINGS = (("lora", "examples/local-lora.yaml"), ("full", "examples/local-tiny.yaml"))
WINDOW = 10
SEEDS = 3
"""Seeds of the full run: `spec.training.seed` 0, 1 and 2 (the task's prompts, the trainer's
sampling and the warm start follow it)."""
AVERAGED = ("reward_first", "reward_last", "reward_rise")


def reward_windows(history: list[dict[str, Any]], window: int = WINDOW) -> dict[str, float]:
    """Mean reward of the first and the last `window` steps (half the steps each when there are
    fewer than twice as many) and the rise from the first to the last."""
    if len(history) < 2:
        raise ValueError(f"{len(history)} steps: at least 2 are needed for a first and a last")
    size = min(window, len(history) // 2)
    first = statistics.fmean(float(r["reward"]) for r in history[:size])
    last = statistics.fmean(float(r["reward"]) for r in history[-size:])
    return {
        "window": size,
        "reward_first": round(first, 4),
        "reward_last": round(last, 4),
        "reward_rise": round(last - first, 4),
    }


def safetensors_figures(version_dir: Path) -> dict[str, int]:
    """Parameters (the tensors' elements) and bytes on disk of one published version: every
    `*.safetensors` file's header (8 bytes of little-endian length, then JSON) is read, and
    every file of the directory counts towards the bytes."""
    params = 0
    for path in sorted(version_dir.glob("*.safetensors")):
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, entry in header.items():
            if name != "__metadata__":
                params += _elements(entry["shape"])
    size = sum(p.stat().st_size for p in version_dir.rglob("*") if p.is_file())
    return {"parameters": params, "publish_bytes": size}


def _elements(shape: list[int]) -> int:
    out = 1
    for dim in shape:
        out *= int(dim)
    return out


def last_version_dir(run_dir: Path) -> Path | None:
    """The newest published version under `run_dir/weights` (versions are `v<N>`)."""
    weights = run_dir / "weights"
    if not weights.is_dir():
        return None
    versions = [p for p in weights.iterdir() if p.is_dir() and p.name[1:].isdigit()]
    return max(versions, key=lambda p: int(p.name[1:]), default=None)


def summarize(name: str, history: list[dict[str, Any]], peak_rss_kib: int | None,
              version: dict[str, int] | None) -> dict[str, Any]:
    """One setting's row of the results file."""
    seconds = [step_seconds(r) for r in history]
    return {
        "setting": name,
        "steps": len(history),
        **reward_windows(history),
        "step_seconds_median": round(statistics.median(seconds), 3) if seconds else None,
        "publish_seconds_median": round(
            statistics.median(float(r.get("publish_seconds", 0.0)) for r in history), 4
        ),
        "trainer_peak_rss_mib": None if peak_rss_kib is None else round(peak_rss_kib / 1024, 1),
        "trainable_parameters": None if version is None else version["parameters"],
        "publish_bytes": None if version is None else version["publish_bytes"],
    }


class PeakRss:
    """Follows a process's `VmHWM` (peak resident set, monotone) until it exits."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.peak_kib: int | None = None
        self._thread: threading.Thread | None = None

    def start(self, process: subprocess.Popen[bytes]) -> None:
        self._thread = threading.Thread(target=self._poll, args=(process,), daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _poll(self, process: subprocess.Popen[bytes]) -> None:
        status = Path(f"/proc/{process.pid}/status")
        while process.poll() is None:
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak_kib = max(self.peak_kib or 0, int(line.split()[1]))
            except OSError:
                return
            threading.Event().wait(self.interval_s)


def mean_row(name: str, example: str, per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """One setting's row over its seeds: the rewards' means, the medians of the timings and
    memory, the last seed's parameters and bytes (the same for every seed), and each seed's
    rise."""
    row: dict[str, Any] = {"example": example, **per_seed[-1], "setting": name}
    for key in AVERAGED:
        row[key] = round(statistics.fmean(float(r[key]) for r in per_seed), 4)
    for key in ("step_seconds_median", "publish_seconds_median", "trainer_peak_rss_mib"):
        values = [float(r[key]) for r in per_seed if r.get(key) is not None]
        row[key] = round(statistics.median(values), 4) if values else None
    row["seeds"] = len(per_seed)
    row["rise_by_seed"] = [r["reward_rise"] for r in per_seed]
    return row


def _revision() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("setting", "steps", "seeds", "first 10", "last 10", "rise", "rise by seed",
            "step s", "peak RSS MiB", "trainable", "publish bytes")
    lines = [" | ".join(head)]
    for r in rows:
        lines.append(" | ".join([
            r["setting"], str(r["steps"]), str(r["seeds"]), fmt(r["reward_first"]),
            fmt(r["reward_last"]), fmt(r["reward_rise"]),
            " ".join(fmt(x) for x in r["rise_by_seed"]), fmt(r["step_seconds_median"], 2),
            fmt(r["trainer_peak_rss_mib"], 0), str(r["trainable_parameters"]),
            str(r["publish_bytes"]),
        ]))
    return "\n".join(lines)


def _run(name: str, example: str, seed: int, steps: int, workdir: Path) -> dict[str, Any]:
    """One `dressage run` of `example` with `seed`: its row (`summarize`)."""
    job = merged(base_job(ROOT / example), {
        "metadata": {"name": f"lora-learning-{name}"},
        "spec": {"evaluation": None, "training": {"seed": seed}},
    })
    watch = PeakRss()
    result = run_job(job, workdir, steps=steps, on_start=watch.start)
    watch.join()
    if not result.ok:
        print(result.output_tail, file=sys.stderr)
        raise SystemExit(f"{example} (seed {seed}): the run failed (exit {result.returncode})")
    version_dir = last_version_dir(workdir / job["metadata"]["name"])
    version = None if version_dir is None else safetensors_figures(version_dir)
    row = {"seed": seed, **summarize(name, result.history, watch.peak_kib, version)}
    print(f"{name} seed {seed}: {steps} steps in {result.wall_seconds:.0f} s, "
          f"rise {row['reward_rise']:.3f}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=None,
                        help="steps of each run (default: the examples' own, 150)")
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds (default {SEEDS})")
    parser.add_argument("--quick", action="store_true", help="4 steps each, one seed, a smoke test")
    parser.add_argument("--workdir", type=Path, default=ROOT / "runs" / "bench-lora-learning")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    own_steps = int(base_job(ROOT / SETTINGS[0][1])["spec"]["training"]["steps"])
    steps = 4 if args.quick else args.steps or own_steps
    out = args.out or (RESULTS.with_name("lora_learning_quick.json") if args.quick else RESULTS)
    seeds = 1 if args.quick else args.seeds
    if seeds < 1 or steps < 2:
        parser.error("--seeds must be >= 1 and --steps >= 2")
    load_before = load_average()
    per_setting: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in SETTINGS}
    for seed in range(seeds):
        for name, example in SETTINGS:
            per_setting[name].append(_run(name, example, seed, steps, args.workdir))
    rows = [mean_row(name, example, per_setting[name]) for name, example in SETTINGS]
    results = {
        "benchmark": "lora_learning",
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "git_revision": _revision(),
        "machine": {"cpus": 2},
        "load_average": {"before": load_before, "after": load_average()},
        "seeds": seeds,
        "steps": steps,
        "rows": {r["setting"]: r for r in rows},
        "lora_rise_over_full": round(rows[0]["reward_rise"] - rows[1]["reward_rise"], 4),
        "runs": per_setting,
    }
    print(table(rows))
    print(f"mean rise, LoRA minus full weights: {results['lora_rise_over_full']:+.3f}")
    write_result(out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
