"""Test-suite wide setup: the event loop policy, and one marker per tier from its directory.

Each top-level directory under `tests/` is a tier and gives its tests the tier's marker, so
`pytest -m unit` is the inner loop (pure, in-process) and `-m "not slow"` leaves out the long
end-to-end runs. A test file outside every tier is a collection error, not a test no marker
selects. A tier whose tests the `-m` expression cannot select is not even collected, so the
unit tier never pays for importing what the other tiers import (SGLang, kopf, the emulation).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

TESTS = Path(__file__).resolve().parent
TIERS = {
    "unit": "unit",
    "integration": "integration",
    "contract": "contract",
    "operator": "operator",
    "chart": "chart",
}
"""Directory under `tests/` -> the marker its tests get (declared in pyproject.toml)."""
ADDED = ("slow", "integration")
"""Markers a test module may add to its tier's (the operator's and the contract tier's
end-to-end tests are `integration` too)."""


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


def could_select(markexpr: str, tier: str) -> bool:
    """Whether a test of `tier`, with any of the markers `ADDED`, can match `markexpr` (True
    when unsure: an expression this cannot read)."""
    try:
        expression = Expression.compile(markexpr)
    except Exception:
        return True
    added = [m for m in ADDED if m != tier]
    for chosen in itertools.product((False, True), repeat=len(added)):
        present = {tier, *(m for m, on in zip(added, chosen, strict=True) if on)}
        if expression.evaluate(_has(present)):
            return True
    return False


def _has(markers: set[str]) -> Callable[..., bool]:
    def matches(name: str, /, **kwargs: object) -> bool:
        return not kwargs and name in markers

    return matches


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    markexpr = config.getoption("markexpr", "")
    path = collection_path.resolve()
    if not markexpr or path.parent != TESTS or path.name not in TIERS:
        return None
    return None if could_select(markexpr, TIERS[path.name]) else True
