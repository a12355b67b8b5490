"""The registry that maps a job's `spec.task.name` to a task. The names are the job model's
(`dressage.api.rl.TASK_NAMES`), which refuses any other when a manifest is read; a task of
one's own is the `dataset` task with a reward function or the `environment` task with an
environment class. Task modules only implement the interfaces of `dressage.tasks.base`; this
module is the one that knows them.
"""

from __future__ import annotations

from dressage.api.job import (
    ARITHMETIC_TASK,
    DATASET_TASK,
    ENVIRONMENT_TASK,
    HOUSEHOLD_TASK,
    LONG_TAIL_TASK,
    DatasetSpec,
    TaskSpec,
)
from dressage.api.loader import ConfigurationError
from dressage.tasks import arithmetic, dataset, environment, household, long_tail
from dressage.tasks.base import Environment, Task, TaskFactory
from dressage.tasks.rewards import BUILTIN_REWARDS
from dressage.tasks.usercode import import_object, resolve_path

_REGISTRY: dict[str, TaskFactory] = {
    ARITHMETIC_TASK: arithmetic.from_spec,
    HOUSEHOLD_TASK: household.from_spec,
    LONG_TAIL_TASK: long_tail.from_spec,
    DATASET_TASK: dataset.from_spec,
    ENVIRONMENT_TASK: environment.from_spec,
}


def task_names() -> list[str]:
    """Registered task names."""
    return sorted(_REGISTRY)


def get_task(spec: TaskSpec) -> Task | Environment:
    """The task or environment named by `spec.name`, configured from `spec`."""
    try:
        factory = _REGISTRY[spec.name]
    except KeyError:
        raise ConfigurationError(
            f"spec.task.name: unknown task {spec.name!r}; known tasks: {', '.join(task_names())}"
        ) from None
    return factory(spec)


def held_out_task(spec: TaskSpec, dataset: DatasetSpec | None = None) -> Task | Environment:
    """What evaluation runs on: the `dataset` task over `dataset` (the job's reward, another
    set of prompts), or a built-in task's held-out split, disjoint from its training prompts
    (`dressage.tasks.held_out`)."""
    if dataset is not None:
        try:
            return get_task(spec.model_copy(update={"dataset": dataset}))
        except ValueError as exc:  # its errors name the task's dataset: say it is this one
            message = str(exc).replace("spec.task.dataset", "spec.evaluation.dataset")
            if "spec.evaluation.dataset" not in message:
                message = f"spec.evaluation.dataset: {message}"
            raise ConfigurationError(message) from exc
    task = get_task(spec)
    held_out = getattr(task, "held_out", None)
    if held_out is None:
        raise ConfigurationError(
            f"spec.evaluation.dataset: the {spec.name!r} task has no held-out split of its "
            "own: give the prompts to evaluate on"
        )
    split: Task | Environment = held_out()
    return split


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
