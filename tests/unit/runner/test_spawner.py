"""Which spawner starts a local run's children: a fresh process unless the child's environment
names another as `module:callable` in `DRESSAGE_SPAWNER`, imported only then; a name that
cannot be imported fails naming the variable (a child started through a named spawner:
tests/integration/test_runner_processes.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from dressage.runner.processes import (
    SPAWNER_ENV,
    Process,
    SpawnerNotFound,
    fresh_process,
    spawner_of,
)

NOT_CALLABLE = 3


def named_spawner(
    argv: Sequence[str], env: Mapping[str, str], *, cpus: Sequence[int] | None
) -> Process:
    raise AssertionError("resolved, never called here")


def test_a_child_starts_as_a_fresh_process_unless_its_environment_names_a_spawner() -> None:
    assert SPAWNER_ENV == "DRESSAGE_SPAWNER"
    assert spawner_of({}) is fresh_process
    assert spawner_of({SPAWNER_ENV: ""}) is fresh_process


def test_the_named_spawner_is_imported_from_its_module() -> None:
    name = f"{__name__}:named_spawner"
    assert spawner_of({SPAWNER_ENV: name}) is named_spawner


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("no_such_module_here:spawn", "No module named 'no_such_module_here'"),
        (f"{__name__}:missing", "has no attribute 'missing'"),
        (__name__, "expected module:callable"),
        (f"{__name__}:NOT_CALLABLE", "not a callable"),
    ],
)
def test_a_spawner_that_cannot_be_imported_fails_naming_the_variable(name: str, why: str) -> None:
    with pytest.raises(SpawnerNotFound, match=f"^DRESSAGE_SPAWNER='{name}'") as caught:
        spawner_of({SPAWNER_ENV: name})
    assert why in str(caught.value)
