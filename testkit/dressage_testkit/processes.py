"""Run a project process (`python -m dressage ...`) until it prints its ready line; find a
free loopback port.

Shared by the engine and proxy test helpers (`dressage_testkit.engine`,
`dressage_testkit.proxy`) and the benchmarks: start the command with the project on
`PYTHONPATH`, drain its output in the background so it never blocks on a full pipe, wait for
the line starting with `marker` and return the URL after it, and on exit terminate the process
(SIGTERM, then SIGKILL after a grace period). Torch-free.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import dressage

PROJECT_ROOT = Path(dressage.__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the time of the call)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ChildProcess(Protocol):
    """What the helpers and tests use of a started process: `subprocess.Popen`'s interface,
    which a process forked by `dressage_testkit.forkserver.ForkServer` offers too."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdout(self) -> IO[str] | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


Spawn = Callable[[Sequence[str], Mapping[str, str]], ChildProcess]
"""Starts a command line with exactly this environment, its stdout and stderr on one text
pipe (`ChildProcess.stdout`)."""


def popen(cmd: Sequence[str], env: Mapping[str, str]) -> ChildProcess:
    """`Spawn` as a fresh process (`subprocess.Popen`)."""
    return subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(env)
    )


@dataclass
class ReadyProcess:
    """A running process and the URL from its ready line."""

    url: str
    process: ChildProcess
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
    spawn: Spawn = popen,
) -> Iterator[ReadyProcess]:
    """Run `cmd` for the duration of the `with` block once it printed `marker` + URL
    (`spawn` starts it: a fresh process unless told otherwise)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROJECT_ROOT), full_env.get("PYTHONPATH", "")) if p
    )
    full_env["PYTHONUNBUFFERED"] = "1"
    process = spawn(cmd, full_env)
    output: list[str] = []
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

    reader = threading.Thread(target=drain, name=f"{name}-output", daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not found.wait(timeout=0.1):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{name} did not print {marker!r} within {startup_timeout_s}s:\n"
                    + "\n".join(output[-30:])
                )
        if not url:
            raise RuntimeError(
                f"{name} exited with {process.wait()} before it was up:\n" + "\n".join(output[-30:])
            )
        yield ReadyProcess(url=url[0], process=process, output=output)
    finally:
        stop_process(process, grace_s=15)
        reader.join(timeout=5)
        if process.stdout is not None:
            process.stdout.close()


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


def stop_process(process: subprocess.Popen[Any] | ChildProcess, *, grace_s: float) -> int:
    """SIGTERM `process` if it still runs, SIGKILL it after `grace_s`; its exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            return process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait(timeout=15)
