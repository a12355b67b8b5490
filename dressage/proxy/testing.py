"""Start a real proxy process for tests and benchmarks.

    with start_engine() as engine, start_proxy([engine.base_url], "--model", "builtin:tiny") as p:
        httpx.post(p.base_url + "/generate", ...)

The proxy runs as `python -m dressage proxy --port 0 ...` on loopback; the helper waits for its
`proxy ready on URL` line, drains its output in the background and terminates it on exit.
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
_MARKER = "proxy ready on "


@dataclasses.dataclass
class ProxyProcess:
    base_url: str
    process: subprocess.Popen[str]
    output: list[str]
    """Every line the proxy printed (stdout and stderr), for failure messages."""


@contextmanager
def start_proxy(
    engine_urls: Sequence[str],
    *args: str,
    env: dict[str, str] | None = None,
    startup_timeout_s: float = 60.0,
) -> Iterator[ProxyProcess]:
    """Run `dressage proxy --engine-urls ... ARGS` for the duration of the `with` block."""
    cmd = [sys.executable, "-m", "dressage", "proxy", "--host", "127.0.0.1", "--port", "0"]
    cmd += ["--engine-urls", ",".join(engine_urls), *args]
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), full_env.get("PYTHONPATH", "")) if p
    )
    full_env["PYTHONUNBUFFERED"] = "1"
    process = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env
    )
    output: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            if not found.is_set() and line.startswith(_MARKER):
                url.append(line[len(_MARKER) :].strip())
                found.set()
        found.set()

    reader = threading.Thread(target=drain, name="proxy-output", daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not found.wait(timeout=0.1):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"proxy not ready within {startup_timeout_s}s:\n" + "\n".join(output[-30:])
                )
        if not url:
            raise RuntimeError(
                f"proxy exited with {process.wait()} before it was up:\n" + "\n".join(output[-30:])
            )
        yield ProxyProcess(base_url=url[0], process=process, output=output)
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
