"""The task interface and the registry that maps `spec.task.name` to a task.

A task is a deterministic, offline prompt source plus a verifiable reward. Prompts are indexed:
`prompt(i)` is a pure function of the task's seed and `i`, so a collector's data position (an
integer) is all a checkpoint needs to resume the data stream without repeating or skipping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dressage.api.job import TaskSpec


@dataclass(frozen=True)
class Prompt:
    """One task instance: the text shown to the policy and what the reward checks against."""

    index: int
    """Position in the task's prompt stream (the data position it was drawn at)."""
    text: str
    """Prompt text, fed to the model as is (single-turn, no chat template)."""
    answer: str
    """Reference answer used by the reward."""


class Task(Protocol):
    """A single-turn verifiable task."""

    name: str

    def prompt(self, index: int) -> Prompt:
        """The prompt at stream position `index` (deterministic; cycles every dataset size)."""
        ...

    def reward(self, prompt: Prompt, completion: str) -> float:
        """Reward of `completion` (the decoded response, without the prompt) for `prompt`."""
        ...


TaskFactory = Callable[[TaskSpec], Task]
_REGISTRY: dict[str, TaskFactory] = {}


def register_task(name: str, factory: TaskFactory) -> None:
    """Make `name` available as `spec.task.name`."""
    _REGISTRY[name] = factory


def task_names() -> list[str]:
    """Registered task names."""
    _load_builtin_tasks()
    return sorted(_REGISTRY)


def get_task(spec: TaskSpec) -> Task:
    """The task named by `spec.name`, configured from `spec`."""
    _load_builtin_tasks()
    try:
        factory = _REGISTRY[spec.name]
    except KeyError:
        raise ValueError(
            f"spec.task.name: unknown task {spec.name!r}; known tasks: {', '.join(task_names())}"
        ) from None
    return factory(spec)


def _load_builtin_tasks() -> None:
    # Imported lazily so registering does not depend on import order.
    from dressage.tasks import arithmetic  # noqa: F401
