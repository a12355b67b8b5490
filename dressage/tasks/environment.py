"""The `environment` task: a user's multi-turn environment class named by import path.

`spec.task.environment: package.module:Class` is imported (see `dressage.tasks.usercode` for
where modules are found) and constructed as `Class(spec)` with the job's task spec, so the class
reads its own settings from `spec.params`, `spec.seed`, `spec.maxTurns` and `spec.datasetSize`.
The result must implement `dressage.tasks.base.Environment` (`name`, `max_turns`,
`episode(index)` returning an `Episode` with `prompt`, `step(action)` and `expert_action()`);
the whitebox agent then plays it like the built-in environments. A class that cannot be built
is a `UserCodeError` naming the exception and the line of the class's code that raised it.
"""

from __future__ import annotations

from dressage.api.job import TaskSpec
from dressage.api.loader import ConfigurationError
from dressage.tasks.base import Environment
from dressage.tasks.faults import raised_at
from dressage.tasks.usercode import UserCodeError, import_object


def from_spec(spec: TaskSpec) -> Environment:
    reference = spec.environment
    if reference is None:
        raise ConfigurationError("spec.task.environment: the environment task needs a class")
    cls = import_object(reference, "spec.task.environment")
    if not callable(cls):
        raise UserCodeError(f"spec.task.environment: {reference} is not a class")
    try:
        environment = cls(spec)
    except Exception as exc:
        frame = raised_at(exc)
        where = "" if frame is None else f" (at {frame})"
        code = "" if frame is None or not frame.code else f"\n    {frame.code}"
        raise UserCodeError(
            f"spec.task.environment: {reference}(spec) raised {type(exc).__name__}: {exc}"
            f"{where}{code}"
        ) from exc
    missing = [attr for attr in ("name", "max_turns", "episode") if not hasattr(environment, attr)]
    if missing or not callable(environment.episode):
        raise UserCodeError(
            f"spec.task.environment: {reference} does not implement "
            f"dressage.tasks.base.Environment (missing {', '.join(missing) or 'episode()'})"
        )
    max_turns = environment.max_turns
    if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
        raise UserCodeError(
            f"spec.task.environment: {reference}.max_turns must be a positive integer, "
            f"got {max_turns!r}"
        )
    result: Environment = environment
    return result
