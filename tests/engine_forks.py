"""The suite's engines start forked from a warm fork server (`dressage_testkit.forkserver`), one per
test process: `start_engine` then costs about 0.2 CPU-seconds instead of the 2.5 a fresh
interpreter spends importing torch. The engine runs the same command line through the same
entry point. The session's environment names the server's socket (`DRESSAGE_FORK_SERVER`) and
its spawner as the launcher's (`DRESSAGE_SPAWNER`, `dressage.runner.processes`), so a
`dressage run` a test starts forks its engines and proxies there too, and `run_command` forks
the `dressage run` and `dressage train` commands tests run. `DRESSAGE_TEST_FRESH_ENGINES=1`
starts every engine and command as a fresh process instead, as the benchmarks and the product
do.

A tier's conftest takes the fixture by importing it."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

import pytest
from dressage_testkit.engine import ENGINE_PRELOAD, engines_forked_from
from dressage_testkit.forkserver import ForkClient, ForkServer, fork_environment

FRESH_ENGINES = "DRESSAGE_TEST_FRESH_ENGINES"


@pytest.fixture(scope="session", autouse=True)
def engine_fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer | None]:
    """The session's engine fork server (None with `DRESSAGE_TEST_FRESH_ENGINES=1`)."""
    if os.environ.get(FRESH_ENGINES, "") not in ("", "0"):
        yield None
        return
    server = ForkServer(tmp_path_factory.mktemp("forkserver"), preload=ENGINE_PRELOAD)
    forking = fork_environment(server.socket_path)
    try:
        server.start()
        os.environ.update(forking)
        with engines_forked_from(server):
            yield server
    finally:
        for name in forking:
            os.environ.pop(name, None)
        server.close()


def run_command(
    argv: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=...)`,
    with a `python -m` command forked from the session's fork server when there is one (a
    `dressage run` or `dressage train` then starts without importing torch again). On timeout
    the command is killed and `subprocess.TimeoutExpired` raised, as `subprocess.run` does."""
    environment = dict(os.environ if env is None else env)
    server = ForkClient.for_command(argv, os.environ)
    if server is None:
        return subprocess.run(
            argv,
            env=environment,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    directory = None if cwd is None else str(cwd)
    process = server.spawn(argv, environment, directory, separate_stderr=True)
    outputs: dict[str, str] = {}
    readers = [
        threading.Thread(target=_read_to_end, args=(stream, name, outputs), daemon=True)
        for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))
    ]
    for reader in readers:
        reader.start()
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)
        raise subprocess.TimeoutExpired(argv, timeout) from None
    finally:
        for reader in readers:
            reader.join(timeout=30)
    return subprocess.CompletedProcess(
        argv, code, outputs.get("stdout", ""), outputs.get("stderr", "")
    )


def _read_to_end(stream: IO[str] | None, name: str, into: dict[str, str]) -> None:
    if stream is None:
        return
    with stream:
        into[name] = stream.read()
