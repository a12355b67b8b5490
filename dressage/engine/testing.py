"""Start a real embedded engine process for tests and benchmarks.

    with start_engine(cache_dir=tmp_path) as engine:
        async with EngineClient(engine.base_url) as client:
            ...

The engine runs as `python -m dressage engine serve --port 0 ...` on loopback; the helper parses
its `engine ready on URL` line (or `engine listening on URL` with `start_unloaded=True`), drains
its output in the background so it never blocks on a full pipe, and terminates it on exit
(SIGTERM, then SIGKILL after a grace period). No torch import here.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import dressage

_PROJECT_ROOT = Path(dressage.__file__).resolve().parents[1]


@dataclasses.dataclass
class EngineProcess:
    base_url: str
    process: subprocess.Popen[str]
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
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The argv of `dressage engine serve` on a free loopback port."""
    cmd = [sys.executable, "-m", "dressage", "engine", "serve", "--host", "127.0.0.1"]
    cmd += ["--port", "0", "--model", model, "--seed", str(seed)]
    cmd += ["--weight-version", weight_version, "--max-batch-size", str(max_batch_size)]
    cmd += ["--threads", str(threads)]
    if cache_dir is not None:
        cmd += ["--cache-dir", str(cache_dir)]
    if start_unloaded:
        cmd.append("--start-unloaded")
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
    extra_args: Sequence[str] = (),
    startup_timeout_s: float = 120.0,
) -> Iterator[EngineProcess]:
    """Run an engine process for the duration of the `with` block; yield its base URL."""
    cmd = engine_command(
        model=model,
        cache_dir=cache_dir,
        seed=seed,
        weight_version=weight_version,
        max_batch_size=max_batch_size,
        threads=threads,
        start_unloaded=start_unloaded,
        extra_args=extra_args,
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env.setdefault("OMP_NUM_THREADS", str(threads))
    env["PYTHONUNBUFFERED"] = "1"
    process = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    output: list[str] = []
    marker = "engine listening on " if start_unloaded else "engine ready on "
    found = threading.Event()
    url: list[str] = []

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            if not found.is_set() and line.startswith(marker):
                url.append(line[len(marker) :].strip())
                found.set()
        found.set()  # the process ended: stop waiting

    reader = threading.Thread(target=drain, name="engine-output", daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not found.wait(timeout=0.1):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"engine did not print {marker!r} within {startup_timeout_s}s:\n"
                    + "\n".join(output[-30:])
                )
        if not url:
            raise RuntimeError(
                f"engine exited with {process.wait()} before it was up:\n" + "\n".join(output[-30:])
            )
        yield EngineProcess(base_url=url[0], process=process, output=output)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
        reader.join(timeout=5)
        if process.stdout is not None:
            process.stdout.close()
