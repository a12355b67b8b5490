"""Arithmetic: `"17+25="` -> `"42"`, rewarded 1 for the exact answer and 0 otherwise.

Single-turn, offline and verifiable by a rule: the reward is exact match of the first number
in the completion (leading spaces ignored, generation stops at end-of-sequence or any
non-digit). Operands are drawn uniformly from `0..max_operand` by a generator seeded from the
job's `spec.task.seed` and the prompt index, so the stream is reproducible and resumable.
Operand pairs of the held-out split (`dressage.tasks.held_out`) are never training prompts:
`held_out()` is the same task over those pairs only, what evaluation uses.
"""

from __future__ import annotations

import copy
import random
import re

from dressage.api.job import TaskSpec
from dressage.tasks.base import Prompt
from dressage.tasks.held_out import Split, draw_in_split, is_held_out

DEFAULT_MAX_OPERAND = 49
ENUMERATED_PAIRS = 1 << 16
"""Up to this many operand pairs, the held-out split's pairs are listed rather than drawn."""
_LEADING_NUMBER = re.compile(r"\s*(\d+)")


class ArithmeticTask:
    """Addition of two non-negative integers."""

    name = "arithmetic"

    def __init__(
        self,
        *,
        seed: int = 0,
        dataset_size: int = 4096,
        max_operand: int = DEFAULT_MAX_OPERAND,
        split: Split = "train",
    ):
        if dataset_size < 1:
            raise ValueError(f"dataset_size must be >= 1, got {dataset_size}")
        if max_operand < 1:
            raise ValueError(f"max_operand must be >= 1, got {max_operand}")
        self.seed = seed
        self.dataset_size = dataset_size
        self.max_operand = max_operand
        self.split: Split = split
        self._pairs: list[tuple[int, int]] | None = None

    def held_out(self) -> ArithmeticTask:
        """This task over its held-out operand pairs only."""
        twin = copy.copy(self)
        twin.split = "heldOut"
        twin._pairs = None
        return twin

    def operands(self, index: int) -> tuple[int, int]:
        """The two operands of prompt `index` (cycles every `dataset_size` prompts), a pair of
        this task's split. The held-out split of a small range lists its pairs in one seeded
        order, so its first prompts are distinct pairs (as many as the split has)."""
        if self.split == "heldOut" and (self.max_operand + 1) ** 2 <= ENUMERATED_PAIRS:
            pairs = self._held_out_pairs()
            return pairs[index % len(pairs)]
        rng = random.Random(f"arithmetic:{self.seed}:{index % self.dataset_size}")
        top = self.max_operand
        return draw_in_split(
            rng,
            lambda r: (r.randint(0, top), r.randint(0, top)),
            lambda pair: f"{pair[0]}+{pair[1]}",
            self.split,
        )

    def _held_out_pairs(self) -> list[tuple[int, int]]:
        if self._pairs is None:
            top = self.max_operand + 1
            pairs = [(a, b) for a in range(top) for b in range(top) if is_held_out(f"{a}+{b}")]
            if not pairs:
                raise ValueError(
                    "the task has too few distinct instances for a heldOut split: widen it "
                    "(spec.task.params.maxOperand)"
                )
            random.Random(f"arithmetic-held-out:{self.seed}").shuffle(pairs)
            self._pairs = pairs
        return self._pairs

    def prompt(self, index: int) -> Prompt:
        a, b = self.operands(index)
        return Prompt(index=index, text=f"{a}+{b}=", answer=str(a + b))

    def reward(self, prompt: Prompt, completion: str) -> float:
        return 1.0 if extract_answer(completion) == prompt.answer else 0.0


def extract_answer(completion: str) -> str | None:
    """The leading number of `completion`, or None when it does not start with one."""
    match = _LEADING_NUMBER.match(completion)
    return match.group(1) if match else None


def from_spec(spec: TaskSpec) -> ArithmeticTask:
    unknown = set(spec.params) - {"maxOperand"}
    if unknown:
        raise ValueError(f"spec.task.params: unknown arithmetic settings {sorted(unknown)}")
    if spec.max_turns not in (None, 1):
        raise ValueError(f"spec.task.maxTurns: arithmetic is single-turn, got {spec.max_turns}")
    raw = spec.params.get("maxOperand", DEFAULT_MAX_OPERAND)
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise ValueError(f"spec.task.params.maxOperand must be an integer, got {raw!r}")
    return ArithmeticTask(seed=spec.seed, dataset_size=spec.dataset_size, max_operand=raw)
