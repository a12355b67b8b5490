"""The built-in tasks' held-out split: no evaluation prompt is ever a training prompt."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.api.job import TaskSpec
from dressage.tasks.arithmetic import ArithmeticTask
from dressage.tasks.held_out import draw_in_split, is_held_out
from dressage.tasks.household import HouseholdEnvironment
from dressage.tasks.long_tail import LongTailTask
from dressage.tasks.registry import held_out_task


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), max_operand=st.integers(4, 999))
def test_no_held_out_arithmetic_prompt_is_a_training_prompt(seed: int, max_operand: int) -> None:
    train = ArithmeticTask(seed=seed, dataset_size=512, max_operand=max_operand)
    held = train.held_out()
    training = {train.prompt(i).text for i in range(512)}
    evaluated = {held.prompt(i).text for i in range(64)}
    assert evaluated
    assert not training & evaluated


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), boxes=st.integers(2, 5))
def test_no_held_out_household_is_a_training_household(seed: int, boxes: int) -> None:
    def key(env: HouseholdEnvironment, i: int) -> tuple[tuple[str, ...], str]:
        episode = env.episode(i)
        return tuple(episode.contents), episode.goal

    train = HouseholdEnvironment(seed=seed, dataset_size=256, boxes=boxes)
    held = train.held_out()
    assert not {key(train, i) for i in range(256)} & {key(held, i) for i in range(32)}


def test_long_tail_keeps_its_lengths_on_its_held_out_split() -> None:
    task = LongTailTask(seed=3)
    held = task.held_out()
    assert isinstance(held, LongTailTask)
    assert held.response_tokens(5, 1) == task.response_tokens(5, 1)
    assert held.prompt(0).text != task.prompt(0).text or held.split == "heldOut"


def test_the_registry_gives_a_built_in_tasks_held_out_split() -> None:
    held = held_out_task(TaskSpec(name="arithmetic", params={"maxOperand": 9}))
    assert isinstance(held, ArithmeticTask)
    assert held.split == "heldOut"


def test_a_split_with_no_instance_is_an_error_not_a_hang() -> None:
    only = next(k for k in map(str, range(100)) if not is_held_out(k))
    with pytest.raises(ValueError, match="too few distinct instances"):
        draw_in_split(random.Random(0), lambda r: only, str, "heldOut")


def test_a_small_ranges_held_out_prompts_are_distinct_pairs_until_the_split_runs_out() -> None:
    held = ArithmeticTask(seed=1, max_operand=19).held_out()
    pairs = {held.prompt(i).text for i in range(200)}
    assert len({held.prompt(i).text for i in range(min(48, len(pairs)))}) == min(48, len(pairs))
    assert all(is_held_out(text.removesuffix("=")) for text in pairs)
