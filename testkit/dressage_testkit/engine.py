"""Start a real embedded engine process for tests and benchmarks.

    with start_engine(cache_dir=tmp_path) as engine:
        async with EngineClient(engine.base_url) as client:
            ...

The engine runs as `python -m dressage engine serve --port 0 ...` on loopback, started by
`run_until_ready` (the product's launcher), which returns the URL of its `engine ready on URL`
line (or `engine listening on URL` with `start_unloaded=True`) and stops it on exit. No torch
import here.

Within `engines_forked_from(server)` (the test suite's default, `tests/engine_forks.py`) the
same command line is forked from a warm `dressage_testkit.forkserver.ForkServer` instead of run
by a fresh interpreter: the engine parses the same arguments and serves the same routes, and
starts without importing torch again. The benchmarks start fresh processes.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from dressage.engine.sglang_support import WEIGHT_VERSION_ROUTES
from dressage_testkit.forkserver import ForkServer
from dressage_testkit.processes import Process, run_until_ready

ENGINE_PRELOAD = (
    "torch",
    "dressage.cli",
    "dressage.engine.embedded.server",
    "dressage.engine.embedded.model",
)
"""What a fork server for engines imports once, before it forks any."""

_fork_server: ForkServer | None = None


@dataclasses.dataclass
class EngineProcess:
    base_url: str
    process: Process
    output: list[str]
    """Every line the engine printed (stdout and stderr), for failure messages."""

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])


def engine_command(
    *,
    model: str = "builtin:tiny",
    cache_dir: Path | None = None,
    seed: int = 0,
    weight_version: str = "v0",
    max_batch_size: int = 32,
    threads: int = 1,
    start_unloaded: bool = False,
    min_step_interval_ms: float = 0.0,
    sglang_release: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The argv of `dressage engine serve` on a free loopback port (`sglang_release`: the
    release to play; None: the engine's default, the newest tested)."""
    cmd = [sys.executable, "-m", "dressage", "engine", "serve", "--host", "127.0.0.1"]
    cmd += ["--port", "0", "--model", model, "--seed", str(seed)]
    cmd += ["--weight-version", weight_version, "--max-batch-size", str(max_batch_size)]
    cmd += ["--threads", str(threads)]
    if cache_dir is not None:
        cmd += ["--cache-dir", str(cache_dir)]
    if start_unloaded:
        cmd.append("--start-unloaded")
    if min_step_interval_ms:
        cmd += ["--min-step-interval-ms", str(min_step_interval_ms)]
    if sglang_release is not None:
        cmd += ["--sglang-release", sglang_release]
    return cmd + list(extra_args)


@contextmanager
def start_engine(
    *,
    model: str = "builtin:tiny",
    cache_dir: Path | None = None,
    seed: int = 0,
    weight_version: str = "v0",
    max_batch_size: int = 32,
    threads: int = 1,
    start_unloaded: bool = False,
    min_step_interval_ms: float = 0.0,
    sglang_release: str | None = None,
    extra_args: Sequence[str] = (),
    startup_timeout_s: float = 120.0,
) -> Iterator[EngineProcess]:
    """Run an engine process for the duration of the `with` block; yield its base URL.

    `min_step_interval_ms` paces decoding (`--min-step-interval-ms`): a test that acts on a
    generation while it runs gets a lower bound of `min_step_interval_ms * max_new_tokens` on
    how long the generation lasts, however loaded the machine is.
    """
    cmd = engine_command(
        model=model,
        cache_dir=cache_dir,
        seed=seed,
        weight_version=weight_version,
        max_batch_size=max_batch_size,
        threads=threads,
        start_unloaded=start_unloaded,
        min_step_interval_ms=min_step_interval_ms,
        sglang_release=sglang_release,
        extra_args=extra_args,
    )
    marker = "engine listening on " if start_unloaded else "engine ready on "
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads))}
    with run_until_ready(
        "engine",
        cmd,
        marker,
        env=env,
        startup_timeout_s=startup_timeout_s,
        forked_from=_fork_server,
    ) as ready:
        yield EngineProcess(base_url=ready.url, process=ready.process, output=ready.output)


@contextmanager
def engines_forked_from(server: ForkServer | None) -> Iterator[ForkServer | None]:
    """Within the block, `start_engine` forks its engines from `server` (None: starts each as
    a fresh process)."""
    global _fork_server
    before, _fork_server = _fork_server, server
    try:
        yield server
    finally:
        _fork_server = before


def weight_version_of(base_url: str, timeout_s: float = 10.0) -> str | None:
    """The weight version an engine reports, read where its release reports it (0.5.23
    `/model_info`, 0.5.2 `/get_weight_version`); a blocking call for tests and benchmarks."""
    for path in WEIGHT_VERSION_ROUTES:
        response = httpx.get(base_url.rstrip("/") + path, timeout=timeout_s)
        if response.status_code == 404:
            continue
        response.raise_for_status()
        version = response.json().get("weight_version")
        return None if version is None else str(version)
    raise ValueError(f"{base_url} reports no weight version on {list(WEIGHT_VERSION_ROUTES)}")
