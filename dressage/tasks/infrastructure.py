"""Failures that are the infrastructure's, not the policy's: what `spec.task.onRewardError:
drop` drops a prompt group for instead of scoring its sample 0.

A reward scores a completion; when the reward cannot be computed because something it relies on
failed (a grading service that timed out or cannot be reached, a sandbox that crashed), a 0
would teach the policy that its answer was wrong and bend its group's GRPO statistics (the
group's mean and spread now hold a number that says nothing about the answers). Under
`onRewardError: drop` such a failure drops the sample's whole group instead, counted by reason
in `dropped_groups` (`reward_error`, `environment_error`); any other failure (a bug: a
`KeyError`, a result that is not a number) still scores 0 and is counted as today.

What counts as the infrastructure's (`is_infrastructure`):
- a reward call that overran `spec.task.rewardTimeoutSeconds` (`reward_timeout`);
- an exception, or one in its `__cause__`/`__context__` chain, that is a `TimeoutError`
  (`asyncio.TimeoutError` and `socket.timeout` among them), a `ConnectionError`
  (`ConnectionRefusedError`, `ConnectionResetError`, `BrokenPipeError`, ...) or an
  `InfrastructureError`;
- an exception of any type whose class or instance has the attribute `dressage_infrastructure`
  set true: how code that does not import Dressage marks its own errors (an HTTP client's,
  a sandbox library's), for example `class SandboxDied(Exception): dressage_infrastructure =
  True`.

User code signals it by raising `InfrastructureError` (importable as
`dressage.tasks.InfrastructureError`), by raising one from the library's error (`raise
InfrastructureError("grader unreachable") from exc`), or with the attribute.
"""

from __future__ import annotations

from typing import Final

REWARD_ERROR: Final = "reward_error"
"""The drop reason of a group whose reward failed for the infrastructure's reason."""
ENVIRONMENT_ERROR: Final = "environment_error"
"""The drop reason of a group whose environment failed for the infrastructure's reason."""
DROP_REASONS: Final = (REWARD_ERROR, ENVIRONMENT_ERROR)
MARKER: Final = "dressage_infrastructure"
"""The attribute that marks an exception type (or one exception) as the infrastructure's."""
DROP_SETTING: Final = "spec.task.onRewardError: drop"


class InfrastructureError(Exception):
    """Raised by a reward or an environment when what failed is the infrastructure it relies
    on (a service, a sandbox), not the policy's answer."""


INFRASTRUCTURE_TYPES: Final = (TimeoutError, ConnectionError, InfrastructureError)


def is_infrastructure(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from or while handling, is the
    infrastructure's (see the module docstring)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, INFRASTRUCTURE_TYPES) or getattr(current, MARKER, False) is True:
            return True
        current = current.__cause__ or current.__context__
    return False
