"""The registry that maps a job's `spec.task.name` to a task: the built-in ones, and any
registered with `register_task`. Task modules only implement the interfaces of
`dressage.tasks.base`; this module is the one that knows them.
"""

from __future__ import annotations

from dressage.api.job import DATASET_TASK, ENVIRONMENT_TASK, TaskSpec
from dressage.tasks import arithmetic, dataset, environment, household, long_tail
from dressage.tasks.base import Environment, Task, TaskFactory
from dressage.tasks.rewards import BUILTIN_REWARDS
from dressage.tasks.usercode import import_object, resolve_path

_REGISTRY: dict[str, TaskFactory] = {
    arithmetic.ArithmeticTask.name: arithmetic.from_spec,
    household.HouseholdEnvironment.name: household.from_spec,
    long_tail.LongTailTask.name: long_tail.from_spec,
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


def check_task(spec: TaskSpec) -> None:
    """Fail fast on what `get_task` would only find later: an unknown task name, user code that
    cannot be imported (`spec.task.reward`, `spec.task.environment`), a dataset path that does
    not exist. Cheap: nothing is loaded or constructed."""
    if spec.name not in _REGISTRY:
        get_task(spec)  # raises the unknown-task error
    if spec.reward is not None and spec.reward not in BUILTIN_REWARDS:
        import_object(spec.reward, "spec.task.reward")
    if spec.environment is not None:
        import_object(spec.environment, "spec.task.environment")
    if spec.dataset is not None and spec.dataset.path is not None:
        resolve_path(spec.dataset.path, "spec.task.dataset.path")
