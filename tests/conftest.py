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
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling, Scheduling
from xdist.workermanage import WorkerController

TESTS = Path(__file__).resolve().parent
TIERS = {
    "unit": "unit",
    "integration": "integration",
    "contract": "contract",
    "operator": "operator",
    "chart": "chart",
    "images": "images",
}
"""Directory under `tests/` -> the marker its tests get (declared in pyproject.toml)."""
ADDED = ("slow", "integration")
"""Markers a test module may add to its tier's (the operator's and the contract tier's
end-to-end tests are `integration` too)."""
SERIAL = "cluster-shaped"
SERIAL_FILES = frozenset(
    {
        "operator/test_cluster_churn.py",
        "operator/test_cluster_run.py",
        "operator/test_cluster_weight_sync.py",
        "operator/test_first_failures.py",
        "operator/test_autoscaling_e2e.py",
        "operator/test_operator_code_e2e.py",
    }
)
"""Test files that run a whole job on the test kubelet (operator, trainer, engines and proxy as
processes, probes with their timeouts). Under pytest-xdist with `--dist loadfile` (as
`scripts/test.sh` runs it) they are one work unit (`SuiteScheduling`), so one process runs
them one after another and two of them never compete for the same two cores; every other file
is a unit of its own."""


def pytest_configure(config: pytest.Config) -> None:
    # The looptime plugin asks the event loop policy for a loop even in sync tests; on Python
    # 3.11 that silently creates a loop nobody closes, and its ResourceWarning (an error under
    # `filterwarnings = error`) then fails whichever async test runs next. Marking the main
    # thread's loop as explicitly unset makes the policy raise instead, which looptime handles.
    asyncio.set_event_loop(None)


WEIGHT_GROUP_THREAD = "weight-group"
"""The name of the threads `dressage.engine.weight_group.in_daemon_thread` runs a rendezvous or
a broadcast in (a unit test keeps the two in step; this module does not import torch)."""
LEFTOVER_GRACE_S = 20.0
"""How long a test's weight-group threads may take to end after it: a rendezvous whose store
stopped ends at once, one left waiting for a rank that never comes ends only at its timeout."""


@pytest.fixture(autouse=True)
def no_rendezvous_outlives_its_test() -> Iterator[None]:
    """A weight-group thread a test started must end with it. One that does not is a rank
    still waiting in a rendezvous nobody will complete (a store left serving after its group
    failed to form): it waits out its timeout in the test process, minutes later logs c10d's
    `waitForInput ... timed out`, and holds its connection (and the engines' ranks theirs)
    until then."""
    before = set(threading.enumerate())
    yield
    started = [
        t for t in threading.enumerate() if t.name == WEIGHT_GROUP_THREAD and t not in before
    ]
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    for thread in started:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    alive = [t for t in started if t.is_alive()]
    if alive:
        pytest.fail(
            f"{len(alive)} weight-group thread(s) still running {LEFTOVER_GRACE_S:.0f} s after "
            "the test: a rendezvous or broadcast left waiting for a rank that never comes"
        )


def tier_of(path: Path) -> str | None:
    """The tier marker of a test file under `tests/`, None outside every tier."""
    try:
        relative = path.resolve().relative_to(TESTS)
    except ValueError:
        return None
    return TIERS.get(relative.parts[0]) if len(relative.parts) > 1 else None


def work_unit_of(nodeid: str) -> str:
    """The pytest-xdist work unit of a test (its node id, relative to the repository):
    `SERIAL` for the cluster-shaped files, else its file under `tests/`."""
    path = nodeid.split("::", 1)[0]
    prefix = f"{TESTS.name}/"
    relative = path[len(prefix) :] if path.startswith(prefix) else path
    return SERIAL if relative in SERIAL_FILES else relative


LONG_UNITS = (
    SERIAL,
    "integration/test_run_learning.py",
    "integration/test_run_user_code.py",
    "integration/test_engine_churn_benchmark.py",
    "integration/test_run_weight_sync.py",
    "integration/test_async_rollout.py",
    "integration/test_long_tail_benchmark.py",
    "integration/test_rollout_process.py",
    "integration/test_trainer_fsdp.py",
    "integration/test_trainer_cli.py",
    "integration/test_fleet_weight_sync.py",
    "integration/test_publish_engine_set.py",
    "integration/test_run_local.py",
    "integration/test_gpu_check.py",
    "integration/test_trainer_reshard.py",
)
"""The work units that take a minute or more, longest first (as measured by `--durations` on
two cores). They are handed out before every other unit: xdist otherwise hands out the units
with the most tests first, which puts these (few tests, each a whole run) last, and one of
them starting when everything else is done leaves a process idle for minutes."""


def longest_first(units: list[str]) -> list[str]:
    """`units` with those of `LONG_UNITS` first, in its order; the rest keep their order."""
    rank = {unit: i for i, unit in enumerate(LONG_UNITS)}
    return sorted(units, key=lambda unit: rank.get(unit, len(rank)))


class SuiteScheduling(LoadFileScheduling):
    """`--dist loadfile` with the cluster-shaped files (`SERIAL_FILES`) as one unit, and the
    long units handed out first (`LONG_UNITS`). (xdist's own `loadgroup` cannot express the
    former under pytest 9: it renames node ids through an attribute pytest 9 no longer reads,
    so its groups never form.)"""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return work_unit_of(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        # The first assignment comes right after xdist filled its work queue.
        if not self._ordered:
            self._ordered = True
            units = dict(self.workqueue)
            self.workqueue.clear()
            for unit in longest_first(list(units)):
                self.workqueue[unit] = units[unit]
        super()._assign_work_unit(node)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    """The suite's scheduler for `--dist loadfile`; xdist's own for any other mode."""
    return SuiteScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


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
