"""Number hunt: a small multi-turn text environment with tools, in the spirit of AlfWorld.

The agent must find a hidden number in `0..size-1`. Each turn it calls one tool:

- `probe N` — the environment answers `higher`, `lower` or `found` (a probe costs a turn);
- `answer N` — ends the episode; reward 1 when N is the hidden number, else 0.

The episode also ends, with reward 0, after `max_turns` turns or on an action the environment
cannot parse (the observation says why, so a trained policy can learn the format). A policy that
bisects wins every episode within ceil(log2(size)) + 1 turns; a random one rarely does, which
leaves room for RL to show progress. Everything here is pure and seeded: `reset(seed)` fixes
the hidden number.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

_ACTION = re.compile(r"^\s*(probe|answer)\s+(\d{1,3})\s*$")


@dataclass(frozen=True)
class StepResult:
    """What the environment says after an action."""

    observation: str
    reward: float
    done: bool


@dataclass
class NumberHunt:
    """One episode of the number hunt."""

    size: int = 8
    max_turns: int = 4
    target: int = 0
    turns: int = 0
    done: bool = False
    history: list[str] = field(default_factory=list)

    @classmethod
    def reset(cls, seed: int, *, size: int = 8, max_turns: int = 4) -> tuple[NumberHunt, str]:
        """A fresh episode and its first observation."""
        if size < 2 or max_turns < 1:
            raise ValueError("size must be >= 2 and max_turns >= 1")
        env = cls(size=size, max_turns=max_turns, target=random.Random(seed).randrange(size))
        return env, f"find n in 0-{size - 1}. tools: probe n, answer n.\n"

    def step(self, action: str) -> StepResult:
        """Apply one action (the model's reply for this turn)."""
        if self.done:
            raise RuntimeError("episode is over")
        self.turns += 1
        self.history.append(action)
        match = _ACTION.match(action)
        if match is None:
            return self._end("bad action\n", 0.0)
        tool, value = match.group(1), int(match.group(2))
        if tool == "answer":
            won = value == self.target
            return self._end("correct\n" if won else "wrong\n", 1.0 if won else 0.0)
        if value == self.target:
            observation = "found\n"
        else:
            observation = "higher\n" if self.target > value else "lower\n"
        if self.turns >= self.max_turns:
            return self._end(observation + "out of turns\n", 0.0)
        return StepResult(observation, 0.0, False)

    def _end(self, observation: str, reward: float) -> StepResult:
        self.done = True
        return StepResult(observation, reward, True)


def expert_actions(target: int, size: int) -> list[str]:
    """A bisecting policy's actions for `target`: what warm-start demonstrations show."""
    low, high = 0, size - 1
    actions: list[str] = []
    while low < high:
        mid = (low + high) // 2
        actions.append(f"probe {mid}")
        if mid == target:
            break
        if target > mid:
            low = mid + 1
        else:
            high = mid - 1
    actions.append(f"answer {target}")
    return actions
