"""Household: a small multi-turn text environment with tools, in the spirit of AlfWorld.

The policy is asked to find an object hidden in one of a few numbered boxes. It has two tools,
called by replying with one command per turn:

    open N   look into box N; the environment answers `box N: <object>`
    take N   take the object from box N, which ends the episode

Taking the goal object from a box the policy has opened earns reward 1. Taking from a box not
opened yet, taking the wrong object, an unparsable reply or a box that does not exist ends the
episode with reward 0, and so does running out of turns. With `boxes` boxes the default turn
limit is `boxes + 1`: opening boxes one by one and taking as soon as the goal shows up always
succeeds, while guessing, re-opening boxes or taking blind does not. The reward therefore
rewards reading the tool's output, which a single-turn task never asks of the policy.

Every instance is a pure function of the seed and its index (which object is the goal, which
box holds what), so the prompt stream is reproducible and resumable. Households of the held-out
split (`dressage.tasks.held_out`: which objects stand in which boxes, and the goal) are never
training instances: `held_out()` plays those only, what evaluation uses.

    <|user|>find the key; boxes 1-3<|end|>
    <|assistant|>open 2<|end|>
    <|tool|>box 2: mug<|end|>
    <|assistant|>open 3<|end|>
    <|tool|>box 3: key<|end|>
    <|assistant|>take 3<|end|>      -> reward 1
"""

from __future__ import annotations

import copy
import random
import re

from dressage.api.job import TaskSpec
from dressage.tasks.base import Step
from dressage.tasks.held_out import Split, draw_in_split

OBJECTS = ("key", "mug", "pen", "cup", "hat", "map", "cap", "egg", "jar")
"""Objects that fill the boxes; each instance uses `boxes` distinct ones."""
DEFAULT_BOXES = 3
MAX_BOXES = len(OBJECTS)
_COMMAND = re.compile(r"\s*(open|take)\s+(\d+)\s*")


class HouseholdEpisode:
    """One search: which box holds what, what was opened, and how many turns were used."""

    def __init__(self, contents: list[str], goal: str, max_turns: int, rng: random.Random):
        self.contents = contents
        """Object in box `n` is `contents[n - 1]`."""
        self.goal = goal
        self.max_turns = max_turns
        self.opened: list[int] = []
        self.turns = 0
        self.done = False
        self._rng = rng
        self.prompt = f"find the {goal}; boxes 1-{len(contents)}"

    @property
    def goal_box(self) -> int:
        return self.contents.index(self.goal) + 1

    def step(self, action: str) -> Step:
        if self.done:
            raise RuntimeError("step() after the episode ended")
        self.turns += 1
        match = _COMMAND.fullmatch(action)
        if match is None:
            return self._end("unknown command; reply `open N` or `take N`", 0.0)
        verb, box = match.group(1), int(match.group(2))
        if not 1 <= box <= len(self.contents):
            return self._end(f"there is no box {box}", 0.0)
        if verb == "take":
            if box in self.opened and self.contents[box - 1] == self.goal:
                return self._end(f"you take the {self.goal}", 1.0)
            return self._end(f"no {self.goal} taken from box {box}", 0.0)
        if box not in self.opened:
            self.opened.append(box)
        observation = f"box {box}: {self.contents[box - 1]}"
        if self.turns >= self.max_turns:
            return self._end(observation, 0.0)
        return Step(observation, 0.0, False)

    def expert_action(self) -> str:
        """Take the goal once it was seen, else open a random box not opened yet."""
        if self.goal_box in self.opened:
            return f"take {self.goal_box}"
        closed = [n for n in range(1, len(self.contents) + 1) if n not in self.opened]
        return f"open {self._rng.choice(closed)}"

    def _end(self, observation: str, reward: float) -> Step:
        self.done = True
        return Step(observation, reward, True)


class HouseholdEnvironment:
    """Find-and-take in `boxes` numbered boxes; `episode(i)` is instance `i`."""

    name = "household"

    def __init__(
        self,
        *,
        seed: int = 0,
        dataset_size: int = 4096,
        boxes: int = DEFAULT_BOXES,
        max_turns: int | None = None,
    ):
        if dataset_size < 1:
            raise ValueError(f"dataset_size must be >= 1, got {dataset_size}")
        if not 2 <= boxes <= MAX_BOXES:
            raise ValueError(f"boxes must be between 2 and {MAX_BOXES}, got {boxes}")
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.seed = seed
        self.dataset_size = dataset_size
        self.boxes = boxes
        self.max_turns = boxes + 1 if max_turns is None else max_turns
        self.split: Split = "train"

    def held_out(self) -> HouseholdEnvironment:
        """This environment over its held-out households only."""
        twin = copy.copy(self)
        twin.split = "heldOut"
        return twin

    def episode(self, index: int) -> HouseholdEpisode:
        rng = random.Random(f"household:{self.seed}:{index % self.dataset_size}")
        boxes = self.boxes

        def draw(r: random.Random) -> tuple[list[str], str]:
            contents = r.sample(OBJECTS, boxes)
            return contents, r.choice(contents)

        contents, goal = draw_in_split(
            rng, draw, lambda h: f"{','.join(h[0])}:{h[1]}", self.split
        )
        return HouseholdEpisode(contents, goal, self.max_turns, rng)


def from_spec(spec: TaskSpec) -> HouseholdEnvironment:
    unknown = set(spec.params) - {"boxes"}
    if unknown:
        raise ValueError(f"spec.task.params: unknown household settings {sorted(unknown)}")
    raw = spec.params.get("boxes", DEFAULT_BOXES)
    if not isinstance(raw, int) or isinstance(raw, bool) or not 2 <= raw <= MAX_BOXES:
        raise ValueError(f"spec.task.params.boxes must be an integer 2..{MAX_BOXES}, got {raw!r}")
    return HouseholdEnvironment(
        seed=spec.seed, dataset_size=spec.dataset_size, boxes=raw, max_turns=spec.max_turns
    )
