"""Shared helpers of the benchmarks: derive a job from an example manifest (by default
`examples/local-tiny.yaml`), run it with `dressage run` in a child process, read back its
per-step history, and write a benchmark's result file (`write_result`).

Each run is a real local run (embedded CPU engine, proxy, in-process GRPO trainer); runs are
started one after the other so they never share the CPU with each other.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dressage.testing import stop_process

ROOT = Path(__file__).resolve().parents[1]
BASE_JOB = ROOT / "examples" / "local-tiny.yaml"


def base_job(path: Path = BASE_JOB) -> dict[str, Any]:
    """An example job (by default the README's learning job), as a plain dict."""
    job: dict[str, Any] = yaml.safe_load(path.read_text())
    return job


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` merged in recursively (a None value deletes the key)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass
class RunResult:
    """One finished `dressage run`: its history lines and how long the process took."""

    name: str
    returncode: int
    wall_seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    output_tail: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.history)


def run_job(
    job: dict[str, Any],
    workdir: Path,
    *,
    steps: int,
    timeout_s: float = 900.0,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> RunResult:
    """Run `job` from scratch for `steps` steps under `workdir` and return its history.

    `on_start` is called with the `dressage run` process once it started (to watch it)."""
    name = str(job["metadata"]["name"])
    workdir.mkdir(parents=True, exist_ok=True)
    manifest = workdir / f"{name}.yaml"
    manifest.write_text(yaml.safe_dump(job, sort_keys=False))
    log = workdir / f"{name}.log"
    cmd = [sys.executable, "-m", "dressage", "run", str(manifest)]
    cmd += ["--workdir", str(workdir), "--steps", str(steps), "--fresh"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    started = time.monotonic()
    timed_out = False
    with log.open("w") as sink:
        process = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env)
        if on_start is not None:
            on_start(process)
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = stop_process(process, grace_s=30)  # the run stops its engine and proxy
        finally:
            if process.poll() is None:  # interrupted: never leave the run behind
                stop_process(process, grace_s=30)
    wall = time.monotonic() - started
    history_path = workdir / name / "history.jsonl"
    history = []
    if history_path.exists():
        history = [json.loads(x) for x in history_path.read_text().splitlines() if x.strip()]
    tail = log.read_text()[-3000:]
    return RunResult(name, code, wall, history, tail, timed_out)


def step_seconds(record: dict[str, Any]) -> float:
    """Wall time of one step: waiting for the batch, training it, publishing the weights."""
    return float(
        record.get("rollout_seconds", 0.0)
        + record.get("train_seconds", 0.0)
        + record.get("publish_seconds", 0.0)
    )


def load_average() -> float:
    """The machine's 1-minute load average (how many runnable processes compete for it)."""
    return round(os.getloadavg()[0], 2)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_result(path: Path, result: Mapping[str, Any], *, announce: bool = True) -> Path:
    """Write a benchmark's result file: `result` as indented JSON (its folder created), and
    print where it went (`announce=False` for the partial results a long benchmark writes
    after each run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    if announce:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"wrote {shown}", flush=True)
    return path
