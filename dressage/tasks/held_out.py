"""The built-in tasks' held-out split: instances no training prompt is ever drawn from.

An instance of a generated task (an operand pair, a household's boxes and goal) has a key; the
key's CRC-32 decides its split once and for all (`is_held_out`: one in `HELD_OUT_EVERY`). The
training stream and the held-out stream draw their instances from the same seeded generator and
skip those of the other split (`draw_in_split`), so the two are disjoint by construction, for
every seed and size, and each stays reproducible from its index.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from typing import Literal, TypeVar

Split = Literal["train", "heldOut"]
HELD_OUT_EVERY = 8
"""One instance key in this many is held out of training."""
MAX_DRAWS = 10_000
"""Draws after which a split is taken to be empty (too few distinct instances)."""

T = TypeVar("T")


def is_held_out(key: str) -> bool:
    """Whether the instance named `key` belongs to the held-out split."""
    return zlib.crc32(key.encode()) % HELD_OUT_EVERY == 0


def draw_in_split(
    rng: random.Random, draw: Callable[[random.Random], T], key: Callable[[T], str], split: Split
) -> T:
    """The first instance `draw(rng)` gives that belongs to `split`; ValueError when none
    does in `MAX_DRAWS` draws."""
    want = split == "heldOut"
    for _ in range(MAX_DRAWS):
        instance = draw(rng)
        if is_held_out(key(instance)) == want:
            return instance
    raise ValueError(
        f"the task has too few distinct instances for a {split} split: widen it "
        "(spec.task.params)"
    )
