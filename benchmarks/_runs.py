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
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from dressage_testkit.processes import stop_process

from dressage.engine.sglang_support import SERVER_INFO_ROUTES

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


def status_of(ok: bool, timed_out: bool, steps: int) -> str:
    """A run's status in a results file: `ok`, `timed out at step N` or `failed at step N`."""
    if timed_out:
        return f"timed out at step {steps}"
    return "ok" if ok else f"failed at step {steps}"


def run_job(
    job: dict[str, Any],
    workdir: Path,
    *,
    steps: int,
    timeout_s: float = 900.0,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
    extra_args: list[str] | None = None,
) -> RunResult:
    """Run `job` from scratch for `steps` steps under `workdir` and return its history.

    `on_start` is called with the `dressage run` process once it started (to watch it);
    `extra_args` are added to its command line (`--churn ...`)."""
    name = str(job["metadata"]["name"])
    workdir.mkdir(parents=True, exist_ok=True)
    manifest = workdir / f"{name}.yaml"
    manifest.write_text(yaml.safe_dump(job, sort_keys=False))
    log = workdir / f"{name}.log"
    cmd = [sys.executable, "-m", "dressage", "run", str(manifest)]
    cmd += ["--workdir", str(workdir), "--steps", str(steps), "--fresh", *(extra_args or [])]
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


def evaluations_of(workdir: Path, name: str) -> list[dict[str, Any]]:
    """The held-out evaluations run `name` under `workdir` wrote (`evaluations.jsonl`, one
    record per evaluated version, oldest first); none when it wrote none."""
    log = workdir / name / "evaluations.jsonl"
    if not log.exists():
        return []
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]


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


def percentile(values: list[float], q: float) -> float | None:
    """The `q`-th percentile (0-100) of `values`, interpolating linearly between ranks (numpy's
    default); None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


ENGINE_READY = "engine ready on "
"""What an embedded engine prints once it serves (`dressage.runner.local.ENGINE_READY`)."""


@dataclass
class EngineSample:
    """The embedded engine's cumulative step figures (the server info's `scheduler_stats`)
    read right after a step finished, with the CPU seconds each process of the run had used."""

    steps_finished: int
    at: float
    """`time.monotonic()` of the read."""
    stats: dict[str, float]
    max_batch_size: int
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds (user + system) so far, by role: `trainer` (the `dressage run` process),
    `engine`, `proxy`, `rollout` (the rollout process, if any)."""


_TICKS = os.sysconf("SC_CLK_TCK")
_ROLES = (("engine serve", "engine"), ("dressage proxy", "proxy"), ("spawn_main", "rollout"))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _wait_seconds(pid: int) -> float:
    """Seconds the live threads of `pid` spent runnable but waiting for a core."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue  # a thread that just ended
    return total


def _add(cpu: dict[str, float], role: str, pid: int) -> None:
    cpu[role] = cpu.get(role, 0.0) + _cpu_seconds(pid)
    cpu[f"{role}_wait"] = cpu.get(f"{role}_wait", 0.0) + _wait_seconds(pid)


def run_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of the `dressage run` process `pid` and of its children, by role,
    and (`<role>_wait`) the seconds their threads waited, runnable, for a core: on a machine
    shared with other work, the time other processes took from the run."""
    cpu: dict[str, float] = {}
    try:
        _add(cpu, "trainer", pid)
    except OSError:
        return cpu
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != pid:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            role = next((r for marker, r in _ROLES if marker in cmdline), None)
            if role is not None:
                _add(cpu, role, int(entry.name))
        except OSError:
            continue  # a process that just ended
    return cpu


class RunWatch:
    """Follows one `dressage run` while it runs.

    After each finished step (a new line in the run's `history.jsonl`) it reads the first
    embedded engine's cumulative step figures, and it stops the run with SIGINT (the run then
    stops its engine and proxy and writes its report, like Ctrl-C) once the steps after the
    first `warmup_steps` took `budget_s` seconds of wall time, or `max_steps` steps were done.
    Pass `start` as `run_job(..., on_start=...)`; `stopped` tells whether the watch ended the
    run."""

    def __init__(
        self,
        run_dir: Path,
        *,
        budget_s: float | None = None,
        max_steps: int | None = None,
        warmup_steps: int = 1,
        interval_s: float = 0.2,
    ) -> None:
        self.run_dir = run_dir
        self.budget_s = budget_s
        self.warmup_steps = warmup_steps
        self.max_steps = max_steps
        self.interval_s = interval_s
        self.engine: list[EngineSample] = []
        self.stopped = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._engine_url: str | None = None
        # The server-info route of the release the engine plays, the first that answers
        # (0.5.2 has only `/get_server_info`, a deprecated alias logging per call in 0.5.23).
        self._info_routes: tuple[str, ...] = SERVER_INFO_ROUTES

    def start(self, process: subprocess.Popen[bytes]) -> None:
        self._thread = threading.Thread(target=self._poll, args=(process,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _poll(self, process: subprocess.Popen[bytes]) -> None:
        history = self.run_dir / "history.jsonl"
        seen = 0
        while not self._stop.is_set() and process.poll() is None:
            lines = []
            if history.exists():
                lines = [x for x in history.read_text().splitlines() if x.strip()]
            if len(lines) > seen:
                seen = len(lines)
                self._read_engine(seen, process.pid)
                records = [json.loads(x) for x in lines]
                spent = sum(step_seconds(r) for r in records[self.warmup_steps :])
                over_budget = self.budget_s is not None and spent >= self.budget_s
                if over_budget or (self.max_steps is not None and seen >= self.max_steps):
                    self.stopped = True
                    process.send_signal(signal.SIGINT)
                    return
            self._stop.wait(self.interval_s)

    def _read_engine(self, steps_finished: int, pid: int) -> None:
        url = self._engine_url or self._find_engine_url()
        if url is None:
            return
        info = None
        for route in self._info_routes:
            try:
                with urllib.request.urlopen(url + route, timeout=5) as answer:
                    info = json.loads(answer.read())
            except urllib.error.HTTPError as exc:
                if exc.code == 404 and len(self._info_routes) > 1:
                    continue  # not this release's route: try the other one
                return
            except (OSError, ValueError):
                return  # the engine is gone or busy: this step goes without a reading
            self._info_routes = (route,)
            break
        if not isinstance(info, dict):
            return
        stats = info.get("scheduler_stats")
        if isinstance(stats, dict):
            self.engine.append(
                EngineSample(
                    steps_finished,
                    time.monotonic(),
                    stats,
                    int(info["max_running_requests"]),
                    run_cpu(pid),
                )
            )

    def _find_engine_url(self) -> str | None:
        log = self.run_dir / "logs" / "engine-0.log"
        if not log.exists():
            return None
        for line in log.read_text(errors="replace").splitlines():
            if ENGINE_READY in line:
                self._engine_url = line.split(ENGINE_READY, 1)[1].split()[0].rstrip("/")
                return self._engine_url
        return None


def engine_utilisation(
    samples: list[EngineSample], *, after_step: int = 1
) -> dict[str, float | None]:
    """The engine's figures between the reading after step `after_step` and the last reading.

    `engine_busy_fraction`: the share of the engine's decode slots that produced a token (its
    `slot_seconds` over `max_batch_size` x the wall time), how full its batches ran;
    `engine_active_fraction`: the share of wall time it was stepping at all; `engine_tokens`
    and `engine_prefill_tokens`: what it generated and prefilled in the window."""
    window = [s for s in samples if s.steps_finished >= after_step]
    empty: dict[str, float | None] = {
        "engine_busy_fraction": None,
        "engine_active_fraction": None,
        "engine_tokens": None,
        "engine_prefill_tokens": None,
        "engine_window_s": None,
    }
    if len(window) < 2:
        return empty
    first, last = window[0], window[-1]
    wall = last.at - first.at
    if wall <= 0:
        return empty

    def delta(key: str) -> float:
        return float(last.stats[key]) - float(first.stats[key])

    cpu = {
        f"cpu_s_{role}": last.cpu[role] - first.cpu[role] for role in last.cpu if role in first.cpu
    }
    return {
        **cpu,
        "engine_busy_fraction": delta("slot_seconds") / (wall * last.max_batch_size),
        "engine_active_fraction": delta("active_seconds") / wall,
        "engine_tokens": delta("tokens"),
        "engine_prefill_tokens": delta("prefill_tokens"),
        "engine_window_s": wall,
    }


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
