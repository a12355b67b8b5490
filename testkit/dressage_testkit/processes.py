"""Run a project process (`python -m dressage ...`) until it prints its ready line; find a
free loopback port.

Shared by the engine and proxy test helpers (`dressage_testkit.engine`,
`dressage_testkit.proxy`) and the benchmarks. `run_until_ready` starts the command through the
product's own launcher (`dressage.runner.processes.ChildProcess`: the project on `PYTHONPATH`,
a session of its own, its output drained in the background so it never blocks on a full pipe),
waits for the line starting with `marker` and returns the URL after it, and on exit stops the
process (SIGTERM to its group, then SIGKILL after a grace period). Torch-free.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dressage.runner.processes import PROJECT_ROOT, SPAWNER_ENV, ChildProcess, Process
from dressage_testkit.forkserver import ForkClient, fork_environment

__all__ = [
    "PROJECT_ROOT",
    "Process",
    "ReadyProcess",
    "exited_within",
    "free_port",
    "run_until_ready",
    "stop_process",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the time of the call)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ReadyProcess:
    """A running process and the URL from its ready line."""

    url: str
    process: Process
    output: list[str]
    """Every line the process printed (stdout and stderr), for failure messages."""


@contextmanager
def run_until_ready(
    name: str,
    cmd: Sequence[str],
    marker: str,
    *,
    env: Mapping[str, str] | None = None,
    startup_timeout_s: float = 60.0,
    forked_from: ForkClient | None = None,
) -> Iterator[ReadyProcess]:
    """Run `cmd` for the duration of the `with` block once it printed `marker` + URL: a fresh
    process, or, with `forked_from`, forked from that fork server. `env` is added to this
    process's environment. `dressage.runner.processes.ChildFailed` when it ends or stays silent
    before its ready line."""
    full_env = {k: v for k, v in os.environ.items() if k != SPAWNER_ENV}
    full_env.update(env or {})
    if forked_from is not None:
        full_env.update(fork_environment(forked_from.socket_path))
    child = ChildProcess(name, cmd, log_path=None, env=full_env)
    child.start()
    try:
        url = child.wait_for_blocking(marker, startup_timeout_s)
        assert child.process is not None
        yield ReadyProcess(url=url, process=child.process, output=child.output)
    finally:
        child.stop(grace_s=15)


def exited_within(pid: int, timeout_s: float) -> bool:
    """Whether process `pid` (not necessarily a child of this one) ends within `timeout_s`."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready)
    finally:
        os.close(fd)


def stop_process(process: subprocess.Popen[Any] | Process, *, grace_s: float) -> int:
    """SIGTERM `process` if it still runs, SIGKILL it after `grace_s`; its exit code (for a
    process a test started itself: `run_until_ready` stops its own)."""
    if process.poll() is None:
        process.terminate()
        try:
            return process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait(timeout=15)
