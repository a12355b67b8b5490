"""Verifiable tasks: deterministic prompt generators with rule-based rewards.

A task is looked up by the job's `spec.task.name` with `get_task(spec.task)`.
"""

from dressage.tasks.base import Prompt, Task, get_task, task_names

__all__ = ["Prompt", "Task", "get_task", "task_names"]
