"""The suite's engines start forked from a warm fork server (`dressage.forkserver`), one per
test process: `start_engine` then costs about 0.2 CPU-seconds instead of the 2.5 a fresh
interpreter spends importing torch. The engine runs the same command line through the same
entry point. The server's socket is named in `DRESSAGE_FORK_SERVER` for the session, so a
`dressage run` a test starts forks its engines and proxies there too
(`dressage.runner.processes`). `DRESSAGE_TEST_FRESH_ENGINES=1` starts every engine as a fresh
process instead, as the benchmarks and the product do.

A tier's conftest takes the fixture by importing it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from dressage.engine.testing import ENGINE_PRELOAD, engines_forked_from
from dressage.forkserver import FORK_SERVER_ENV, ForkServer

FRESH_ENGINES = "DRESSAGE_TEST_FRESH_ENGINES"


@pytest.fixture(scope="session", autouse=True)
def engine_fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer | None]:
    """The session's engine fork server (None with `DRESSAGE_TEST_FRESH_ENGINES=1`)."""
    if os.environ.get(FRESH_ENGINES, "") not in ("", "0"):
        yield None
        return
    server = ForkServer(tmp_path_factory.mktemp("forkserver"), preload=ENGINE_PRELOAD)
    try:
        server.start()
        os.environ[FORK_SERVER_ENV] = str(server.socket_path)
        with engines_forked_from(server):
            yield server
    finally:
        os.environ.pop(FORK_SERVER_ENV, None)
        server.close()
