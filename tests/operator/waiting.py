"""The one wait of the operator tests: poll a condition until it holds or a deadline passes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(condition: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    """Poll `condition` every 0.1 s until it returns a truthy value, and return that value;
    AssertionError naming `what` once `timeout` seconds passed without."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.1)
