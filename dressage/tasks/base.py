"""The task interfaces: single-turn tasks and multi-turn environments.

Two kinds of task, both deterministic and offline, both indexed: what prompt `i` holds is a pure
function of the task's seed and `i`, so a collector's data position (an integer) is all a
checkpoint needs to resume the data stream without repeating or skipping.

- A single-turn `Task` is a prompt source plus a verifiable reward on one completion; a
  `FixedLengthTask` also fixes each response's length.
- A multi-turn `Environment` hands out stateful `Episode`s: the policy acts, the environment
  answers with an observation (a tool's output) until the episode is done, and the reward comes
  from the environment's rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from typing_extensions import TypeIs

from dressage.api.job import TaskSpec


@dataclass(frozen=True)
class Prompt:
    """One task instance: the text shown to the policy and what the reward checks against."""

    index: int
    """Position in the task's prompt stream (the data position it was drawn at)."""
    text: str
    """Prompt text: one user message rendered with the chat template (or the question handed
    to a blackbox agent program)."""
    answer: str
    """Reference answer used by the reward."""
    messages: tuple[Mapping[str, str], ...] | None = None
    """Chat messages (`{"role", "content"}`) rendered with the chat template instead of
    `text`; a dataset's messages column or its system prompt."""
    raw: bool = False
    """Feed `text` to the model as is, without the chat template."""
    row: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """Dataset row columns handed to the reward."""


class Task(Protocol):
    """A single-turn verifiable task."""

    name: str

    def prompt(self, index: int) -> Prompt:
        """The prompt at stream position `index` (deterministic; cycles every dataset size)."""
        ...

    def reward(self, prompt: Prompt, completion: str) -> float:
        """Reward of `completion` (the decoded response, without the prompt) for `prompt`."""
        ...


class FixedLengthTask(Task, Protocol):
    """A single-turn task that fixes the length of every response (`dressage.tasks.long_tail`):
    the rollout generates exactly `response_tokens(index, member)` tokens, end-of-sequence
    ignored, whatever the policy would have stopped at."""

    max_response_tokens: int
    """The longest response `response_tokens` ever asks for."""

    def response_tokens(self, index: int, member: int) -> int:
        """The response length of group member `member` at prompt `index` (deterministic)."""
        ...


@dataclass(frozen=True)
class Step:
    """What an environment answers to one action."""

    observation: str
    """Text shown to the policy before its next turn (the tool's output)."""
    reward: float
    """Reward of this step; a trajectory's reward is the sum over its steps."""
    done: bool
    """Whether the episode ended (success, failure or turn limit)."""


class Episode(Protocol):
    """One run of a multi-turn environment on one prompt instance."""

    prompt: str
    """The first user message: the goal and what the policy can do."""

    def step(self, action: str) -> Step:
        """Apply the policy's decoded reply and advance the episode."""
        ...

    def expert_action(self) -> str:
        """A good next action from the current state (the warm start's demonstrations)."""
        ...


class Environment(Protocol):
    """A multi-turn task: `episode(i)` starts a fresh episode of prompt instance `i`."""

    name: str
    max_turns: int
    """Turns after which an episode ends unsuccessfully."""

    def episode(self, index: int) -> Episode:
        """A new episode of instance `index`; every call starts from the same state."""
        ...


@dataclass(frozen=True)
class Scored:
    """One sample's reward with what the report needs of it: the named parts of a reward
    returning a dict, and why the reward call failed when it did (the sample then has 0)."""

    value: float
    parts: Mapping[str, float] | None = None
    failure: str | None = None
    """The failure reason (`reward_raised`, `reward_timeout`, `reward_invalid`), or None."""

    def metadata(self) -> dict[str, Any]:
        """What a sample's `metadata` carries of it (`REWARD_PARTS`, `REWARD_FAILURE`; nothing
        for a plain reward)."""
        out: dict[str, Any] = {}
        if self.parts:
            out[REWARD_PARTS] = dict(self.parts)
        if self.failure is not None:
            out[REWARD_FAILURE] = self.failure
        return out


REWARD_PARTS: Final = "reward_parts"
"""The sample metadata key of its reward's named parts (`{name: value}`)."""
REWARD_FAILURE: Final = "reward_failure"
"""The sample metadata key of its reward call's failure reason."""


async def scored(task: Task, prompt: Prompt, completion: str) -> Scored:
    """`score` with the reward's parts and failure: the task's own `ascored` when it has one
    (a dataset task's reward function), else the plain reward."""
    ascored = getattr(task, "ascored", None)
    if ascored is not None:
        result = await ascored(prompt, completion)
        assert isinstance(result, Scored)
        return result
    return Scored(await score(task, prompt, completion))


async def score(task: Task, prompt: Prompt, completion: str) -> float:
    """The reward of `completion`, as rollout awaits it: the task's own `areward` when it has
    one (a user's reward function, run with its timeout off the event loop), else its rule,
    which is instant."""
    areward = getattr(task, "areward", None)
    if areward is not None:
        return float(await areward(prompt, completion))
    return task.reward(prompt, completion)


def has_fixed_lengths(task: Task | Environment) -> TypeIs[FixedLengthTask]:
    """Whether `task` fixes each response's length (a `FixedLengthTask`)."""
    return callable(getattr(task, "response_tokens", None))


def is_environment(task: Task | Environment) -> TypeIs[Environment]:
    """Whether `task` is a multi-turn environment rather than a single-turn task."""
    return callable(getattr(task, "episode", None))


TaskFactory = Callable[[TaskSpec], Task | Environment]
"""Builds a task from the job's `spec.task` (its seed, size and params)."""
