"""The registry that maps a job's `spec.task.name` to a task: the built-in ones, and any
registered with `register_task`. Task modules only implement the interfaces of
`dressage.tasks.base`; this module is the one that knows them.
"""

from __future__ import annotations

from dressage.api.job import DATASET_TASK, ENVIRONMENT_TASK, TaskSpec
from dressage.tasks import arithmetic, dataset, environment, household
from dressage.tasks.base import Environment, Task, TaskFactory

_REGISTRY: dict[str, TaskFactory] = {
    arithmetic.ArithmeticTask.name: arithmetic.from_spec,
    household.HouseholdEnvironment.name: household.from_spec,
    DATASET_TASK: dataset.from_spec,
    ENVIRONMENT_TASK: environment.from_spec,
}


def register_task(name: str, factory: TaskFactory) -> None:
    """Make `name` available as `spec.task.name`."""
    _REGISTRY[name] = factory


def task_names() -> list[str]:
    """Registered task names."""
    return sorted(_REGISTRY)


def get_task(spec: TaskSpec) -> Task | Environment:
    """The task or environment named by `spec.name`, configured from `spec`."""
    try:
        factory = _REGISTRY[spec.name]
    except KeyError:
        raise ValueError(
            f"spec.task.name: unknown task {spec.name!r}; known tasks: {', '.join(task_names())}"
        ) from None
    return factory(spec)
