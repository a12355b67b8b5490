"""A user-defined multi-turn environment: guess a secret number, told "higher" or "lower".

`examples/local-environment.yaml` names it as `envs.guess_number:GuessNumber` (the module is
found beside the manifest); Dressage imports nothing else from it. It implements the
`dressage.tasks.base.Environment` protocol: `name`, `max_turns` and `episode(index)`, whose
episode has the first user message as `prompt`, `step(action)` returning a `Step`
(observation, reward, done) and `expert_action()` (binary search, the warm start's
demonstrations). The whitebox agent plays it: each reply is one guess, each observation comes
back as a tool message of the chat template.

Settings come from the job's `spec.task` (`params.limit`, the largest number; `maxTurns`;
`seed`). Reward 1 for naming the secret within the turn limit, else 0.
"""

from __future__ import annotations

from typing import Any

from dressage.tasks.base import Step


class GuessEpisode:
    """One game: a fixed secret in `0..limit`, and the range still consistent with the hints."""

    def __init__(self, secret: int, limit: int) -> None:
        self.secret = secret
        self.low, self.high = 0, limit
        self.prompt = f"Guess my number, 0 to {limit}. Reply with a number."

    def step(self, action: str) -> Step:
        try:
            guess = int(action.strip())
        except ValueError:
            return Step("a number", 0.0, False)
        if guess == self.secret:
            return Step("yes", 1.0, True)
        if guess < self.secret:
            self.low = max(self.low, guess + 1)
            return Step("higher", 0.0, False)
        self.high = min(self.high, guess - 1)
        return Step("lower", 0.0, False)

    def expert_action(self) -> str:
        return str((self.low + self.high) // 2)


class GuessNumber:
    """Instance `i` hides a number drawn from `i` and the task seed, the same on every call."""

    name = "guess-number"

    def __init__(self, spec: Any) -> None:
        self.limit = int(spec.params.get("limit", 7))
        if self.limit < 1:
            raise ValueError(f"spec.task.params.limit must be at least 1, got {self.limit}")
        self.seed = int(spec.seed)
        # Binary search needs ceil(log2(limit + 1)) guesses.
        self.max_turns = spec.max_turns or self.limit.bit_length() + 1

    def episode(self, index: int) -> GuessEpisode:
        secret = (index * 2654435761 + self.seed * 97) % (self.limit + 1)
        return GuessEpisode(secret, self.limit)
