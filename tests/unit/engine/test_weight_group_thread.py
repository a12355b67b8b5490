"""`in_daemon_thread`: a rendezvous or broadcast runs in a daemon thread; when the side awaiting
it is cancelled, the thread's late outcome is dropped instead of failing in the thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from dressage.engine.weight_group import THREAD_NAME, in_daemon_thread
from tests.conftest import WEIGHT_GROUP_THREAD


async def test_a_cancelled_wait_drops_the_threads_late_failure() -> None:
    started, release = threading.Event(), threading.Event()
    failures: list[Any] = []
    threads: list[threading.Thread] = []
    previous = threading.excepthook
    threading.excepthook = failures.append

    def rendezvous() -> None:
        threads.append(threading.current_thread())
        started.set()
        release.wait()
        raise TimeoutError("wait timeout: the rank never came")

    try:
        task = asyncio.ensure_future(in_daemon_thread(rendezvous))
        await asyncio.to_thread(started.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        # Only this test's thread (tests/conftest.py checks every test for the others).
        threads[0].join(timeout=30)
        assert not threads[0].is_alive()
    finally:
        threading.excepthook = previous
    assert failures == []


async def test_the_outcome_reaches_the_awaiting_side() -> None:
    assert await in_daemon_thread(lambda x: x + 1, 1) == 2
    with pytest.raises(TimeoutError, match="never came"):
        await in_daemon_thread(_fail)


def _fail() -> None:
    raise TimeoutError("the rank never came")


def test_the_suite_watches_these_threads_by_their_name() -> None:
    """`tests/conftest.py` fails a test whose weight-group threads outlive it; it finds them by
    name without importing torch."""
    assert WEIGHT_GROUP_THREAD == THREAD_NAME
