"""Where a local run's processes run: core lists in the job are read and checked against the
cores this machine offers (the children's pinning itself:
tests/integration/test_runner_processes.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dressage.api.job import AsyncRLJobSpec
from dressage.runner.local import rollout_process_cpus
from dressage.runner.processes import available_cpus
from dressage.runner.startup_checks import check_cpus


def _spec(**local: object) -> AsyncRLJobSpec:
    return AsyncRLJobSpec.model_validate({"model": {"source": "builtin:tiny"}, "local": local})


def test_core_lists_and_pacing_are_read_from_the_job() -> None:
    spec = _spec(engineCpus=[0], trainerCpus=[1], rolloutCpus=[0], engineMinStepIntervalMs=50)
    assert spec.local.engine_cpus == [0]
    assert spec.local.trainer_cpus == [1]
    assert spec.local.rollout_cpus == [0]
    assert spec.local.engine_min_step_interval_ms == 50.0
    defaults = _spec()
    assert defaults.local.engine_cpus is None
    assert defaults.local.trainer_cpus is None
    assert defaults.local.engine_min_step_interval_ms == 0.0


@pytest.mark.parametrize(
    ("local", "field"),
    [
        ({"engineCpus": [-1]}, "engineCpus"),
        ({"trainerCpus": []}, "trainerCpus"),
        ({"rolloutCpus": ["x"]}, "rolloutCpus"),
        ({"engineMinStepIntervalMs": -1}, "engineMinStepIntervalMs"),
    ],
)
def test_bad_placement_is_refused_naming_the_field(local: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        _spec(**local)


def test_cores_this_machine_does_not_offer_are_refused_naming_the_field() -> None:
    missing = max(available_cpus()) + 1
    with pytest.raises(ValueError, match=r"spec\.local\.engineCpus: cores \[\d+\]"):
        check_cpus([missing], "spec.local.engineCpus")
    check_cpus(available_cpus()[:1], "spec.local.engineCpus")  # usable cores pass
    check_cpus(None, "spec.local.engineCpus")  # unset: not pinned


@pytest.mark.parametrize(
    ("mode", "local", "cores"),
    [
        # Sync: the trainer waits for the batch, so rollout takes its idle cores.
        ("sync", {"engineCpus": [0], "trainerCpus": [1]}, [1]),
        ("sync", {"engineCpus": [0]}, None),
        # Async: the trainer trains meanwhile, so rollout shares the engines' cores.
        ("fully_async", {"engineCpus": [0], "trainerCpus": [1]}, [0]),
        ("partial_async", {"engineCpus": [0], "trainerCpus": [1]}, [0]),
        ("fully_async", {}, None),
        # Set explicitly: the job decides.
        ("sync", {"engineCpus": [0], "trainerCpus": [1], "rolloutCpus": [0]}, [0]),
        ("fully_async", {"engineCpus": [0], "rolloutCpus": [1]}, [1]),
    ],
)
def test_the_rollout_process_runs_where_the_mode_leaves_cores_idle(
    mode: str, local: dict[str, object], cores: list[int] | None
) -> None:
    spec = AsyncRLJobSpec.model_validate(
        {"model": {"source": "builtin:tiny"}, "rollout": {"mode": mode}, "local": local}
    )
    assert rollout_process_cpus(spec) == cores
