"""Verifiable tasks: deterministic prompt generators and multi-turn environments with
rule-based rewards.

A task is looked up by the job's `spec.task.name` with `get_task(spec.task)`.
"""

from dressage.tasks.base import (
    Environment,
    Episode,
    Prompt,
    Step,
    Task,
    get_task,
    is_environment,
    task_names,
)

__all__ = [
    "Environment",
    "Episode",
    "Prompt",
    "Step",
    "Task",
    "get_task",
    "is_environment",
    "task_names",
]
