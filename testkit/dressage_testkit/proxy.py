"""Start a real proxy process for tests and benchmarks.

    with start_engine() as engine, start_proxy([engine.base_url], "--model", "builtin:tiny") as p:
        httpx.post(p.base_url + "/generate", ...)

The proxy runs as `python -m dressage proxy --port 0 ...` on loopback, a fresh process started
by `run_until_ready`, which waits for its `proxy ready on URL` line and stops it on exit.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from dressage_testkit.processes import Process, run_until_ready

_MARKER = "proxy ready on "


@dataclasses.dataclass
class ProxyProcess:
    base_url: str
    process: Process
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
    if engine_urls:  # else the engines come from ARGS (`--engine-urls-file`)
        cmd += ["--engine-urls", ",".join(engine_urls)]
    cmd += list(args)
    with run_until_ready(
        "proxy", cmd, _MARKER, env=env, startup_timeout_s=startup_timeout_s
    ) as ready:
        yield ProxyProcess(base_url=ready.url, process=ready.process, output=ready.output)
