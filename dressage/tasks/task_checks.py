"""Checks of a job's task that need no model, engine or proxy, run before any of them starts.

`dressage run` calls `preflight` first, so a job that cannot work fails in a second or two with
a configuration error (exit code 2) instead of after the engines and the proxy have started:

- the task name, the import paths of its user code and the dataset's path (`check_task`);
- the task itself, built as the run will build it: a dataset is read and checked (the columns
  the spec names, at least one usable row; bad rows are reported with their line), a user
  environment is imported and constructed;
- a blackbox agent: its program is found, and the task is single-turn;
- a dry call of the dataset task's reward on its first usable row, with that row's reference
  answer as the completion. The call is made exactly as rollout makes it (timeout included),
  but counted nowhere. It is made only when the dataset has an `answerColumn`: without one no
  completion is known to be right, and a reward that refuses a made-up one would stop a job
  that is fine. A reward with side effects (a paid API, a file it appends to) sees that one
  extra call.

Environments' episodes are not started: an episode may hold resources (a sandbox, a game
server) that a check should not take.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from dressage.api.job import TaskSpec
from dressage.api.loader import ConfigurationError
from dressage.tasks.base import Environment, Task, is_environment
from dressage.tasks.dataset import DatasetTask
from dressage.tasks.registry import check_task, get_task


@dataclass(frozen=True)
class Preflight:
    """The task as built by the checks, and what they found, one note per check."""

    task: Task | Environment
    notes: tuple[str, ...]


def preflight(spec: TaskSpec) -> Preflight:
    """Check `spec` as far as it can be checked without a model or an engine; raises a
    `ConfigurationError` naming the field at fault."""
    check_task(spec)
    task = get_task(spec)
    notes: list[str] = []
    if spec.agent == "blackbox":
        if is_environment(task):
            raise ConfigurationError(
                f"spec.task.agent: {task.name} is a multi-turn environment that only the "
                "whitebox agent plays; blackbox agents need a single-turn task"
            )
        program = (spec.agent_command or [""])[0]
        if shutil.which(program) is None:
            raise ConfigurationError(
                f"spec.task.agentCommand: {program!r} is not an executable program (looked in "
                "the working directory and on PATH)"
            )
    if isinstance(task, DatasetTask):
        skipped = f", {task.bad_row_count} skipped" if task.bad_row_count else ""
        rows = f"{len(task)} usable row{'s' if len(task) != 1 else ''}"
        notes.append(f"{task.source}: {rows}{skipped}")
        notes.append(_dry_run(task, spec))
    elif is_environment(task):
        notes.append(f"environment {task.name} built (max {task.max_turns} turns)")
    return Preflight(task, tuple(notes))


def _dry_run(task: DatasetTask, spec: TaskSpec) -> str:
    """Call the reward once on the first usable row with its answer; the note saying so."""
    reward = task.reward_function
    if spec.dataset is None or spec.dataset.answer_column is None:
        return (
            f"reward {reward.name} not dry-called: without an answerColumn no completion is "
            "known to be right"
        )
    prompt = task.prompt(0)
    where = task.location(0)
    completion = f"{prompt.answer!r:.60}"
    value = reward.dry_run(
        prompt.answer,
        prompt.row,
        where=f"dry-called on {where} with its answer {completion} as the completion",
    )
    return f"reward {reward.name} gives {value:g} to the answer of {where}"
