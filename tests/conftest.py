"""Test-suite wide setup."""

from __future__ import annotations

import asyncio

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # The looptime plugin asks the event loop policy for a loop even in sync tests; on Python
    # 3.11 that silently creates a loop nobody closes, and its ResourceWarning (an error under
    # `filterwarnings = error`) then fails whichever async test runs next. Marking the main
    # thread's loop as explicitly unset makes the policy raise instead, which looptime handles.
    asyncio.set_event_loop(None)
