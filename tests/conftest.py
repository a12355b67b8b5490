"""Test-suite wide setup: the event loop policy, and one marker per tier from its directory.

Each top-level directory under `tests/` is a tier and gives its tests the tier's marker, so
`pytest -m unit` is the inner loop (pure, in-process) and `-m "not slow"` leaves out the long
end-to-end runs. A test file outside every tier is a collection error, not a test no marker
selects.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = {
    "unit": "unit",
    "integration": "integration",
    "contract": "contract",
    "operator": "operator",
    "chart": "chart",
}
"""Directory under `tests/` -> the marker its tests get (declared in pyproject.toml)."""


def pytest_configure(config: pytest.Config) -> None:
    # The looptime plugin asks the event loop policy for a loop even in sync tests; on Python
    # 3.11 that silently creates a loop nobody closes, and its ResourceWarning (an error under
    # `filterwarnings = error`) then fails whichever async test runs next. Marking the main
    # thread's loop as explicitly unset makes the policy raise instead, which looptime handles.
    asyncio.set_event_loop(None)


def tier_of(path: Path) -> str | None:
    """The tier marker of a test file under `tests/`, None outside every tier."""
    try:
        relative = path.resolve().relative_to(TESTS)
    except ValueError:
        return None
    return TIERS.get(relative.parts[0]) if len(relative.parts) > 1 else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    outside: list[str] = []
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            outside.append(item.nodeid)
        else:
            item.add_marker(tier)
    if outside:
        tiers = ", ".join(f"tests/{d}/" for d in TIERS)
        raise pytest.UsageError(f"tests outside every tier ({tiers}): {', '.join(outside[:5])}")
