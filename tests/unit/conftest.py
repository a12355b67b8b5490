"""The unit tier is pure and in-process: a unit test that opens a network socket or starts a
process fails, naming what it did, instead of slowly turning the fast tier into a second
integration tier. Such a test belongs in `tests/integration/`.

The guard covers each test's own body and its function-scoped fixtures; sockets of other
families (the event loop's self-pipe is a Unix socket pair) are left alone.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

NETWORK = (socket.AF_INET, socket.AF_INET6)


@pytest.fixture(scope="session", autouse=True)
def _font_cache() -> None:
    """matplotlib builds its font list on its first import on a machine, running `fc-list`; on
    a fresh machine that first import may come from a unit test that plots. The list is built
    here, once per session, outside the guard."""
    with contextlib.suppress(ImportError):
        import matplotlib.font_manager  # noqa: F401


def _refuse(what: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"a unit test {what}; tests/unit is pure and in-process, "
            "so this test belongs in tests/integration/"
        )

    return refused


def _network_only(method: Callable[..., Any], what: str) -> Callable[..., Any]:
    def guarded(sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
        if sock.family in NETWORK:
            _refuse(f"{what} a network socket ({args[0] if args else ''})")()
        return method(sock, *args, **kwargs)

    return guarded


@pytest.fixture(autouse=True)
def _in_process_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("bind", "connect", "connect_ex"):
        method = getattr(socket.socket, name)
        monkeypatch.setattr(socket.socket, name, _network_only(method, f"{name}s"))
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("starts a process"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse("starts a process"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"calls os.{name}"))
