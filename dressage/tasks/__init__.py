"""Verifiable tasks: deterministic prompt generators and multi-turn environments with
rule-based rewards.

Modules: `base` (the `Task`, `Environment` and `Episode` interfaces), `registry` (`get_task`
looks up the job's `spec.task.name`), `arithmetic`, `long_tail` (arithmetic with heavy-tailed
response lengths) and `household` (the built-in ones),
`dataset` (prompts from JSONL, Parquet or Hugging Face datasets), `rewards` (rewards as code,
built-in exact match and math checking), `environment` (a user's environment class),
`usercode` (import paths of user code), `faults` (what user code raised and where, once per
distinct error), `infrastructure` (the failures that are the infrastructure's, which
`onRewardError: drop` drops a group for; user code raises `InfrastructureError`),
`preflight` (the checks of a job's task before anything starts), `codec` (prompts and
conversations as token ids through the model's tokenizer).
"""

from dressage.tasks.base import Environment, Episode, Prompt, Step, Task, is_environment
from dressage.tasks.infrastructure import InfrastructureError
from dressage.tasks.registry import check_task, get_task, task_names

__all__ = [
    "Environment",
    "Episode",
    "InfrastructureError",
    "Prompt",
    "Step",
    "Task",
    "check_task",
    "get_task",
    "is_environment",
    "task_names",
]
