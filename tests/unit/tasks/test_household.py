"""The household environment: reproducible instances, its rules, and an expert that always wins."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.api.job import TaskSpec
from dressage.tasks import get_task, is_environment, task_names
from dressage.tasks.household import OBJECTS, HouseholdEnvironment, HouseholdEpisode


def _env(**kwargs: int) -> HouseholdEnvironment:
    task = get_task(TaskSpec(name="household", **kwargs))
    assert isinstance(task, HouseholdEnvironment)
    return task


def test_household_is_a_registered_environment() -> None:
    assert "household" in task_names()
    assert is_environment(get_task(TaskSpec(name="household")))
    assert not is_environment(get_task(TaskSpec(name="arithmetic")))


def test_instances_are_a_pure_function_of_seed_and_index() -> None:
    a, b, other = _env(seed=3), _env(seed=3), _env(seed=4)
    episodes = [(a.episode(i), b.episode(i), other.episode(i)) for i in range(30)]
    assert all(x.prompt == y.prompt and x.contents == y.contents for x, y, _ in episodes)
    assert [x.contents for x, _, _ in episodes] != [z.contents for _, _, z in episodes]
    cycled = _env(dataset_size=5)
    assert cycled.episode(7).contents == cycled.episode(2).contents


def test_an_instance_hides_one_goal_among_distinct_objects() -> None:
    env = HouseholdEnvironment(boxes=4)
    for i in range(50):
        episode = env.episode(i)
        assert len(set(episode.contents)) == 4
        assert set(episode.contents) <= set(OBJECTS)
        assert episode.prompt == f"find the {episode.goal}; boxes 1-4"


def _play(episode: HouseholdEpisode, actions: list[str]) -> list[tuple[str, float, bool]]:
    return [(s.observation, s.reward, s.done) for s in map(episode.step, actions)]


def test_opening_shows_the_box_and_taking_the_goal_after_seeing_it_wins() -> None:
    episode = HouseholdEnvironment().episode(0)
    box = episode.goal_box
    other = next(n for n in (1, 2, 3) if n != box)
    steps = _play(episode, [f"open {other}", f" open {box} ", f"take {box}"])
    assert steps == [
        (f"box {other}: {episode.contents[other - 1]}", 0.0, False),
        (f"box {box}: {episode.goal}", 0.0, False),
        (f"you take the {episode.goal}", 1.0, True),
    ]


@pytest.mark.parametrize(
    ("actions", "observation"),
    [
        (["take {goal}"], "no {obj} taken from box {goal}"),  # blind: never opened
        (["open {wrong}", "take {wrong}"], "no {obj} taken from box {wrong}"),
        (["look around"], "unknown command; reply `open N` or `take N`"),
        (["open 7"], "there is no box 7"),
        (["open 0"], "there is no box 0"),
        (["open {wrong}", "open {wrong}", "open {wrong}", "open {wrong}"], "box {wrong}: {x}"),
    ],
)
def test_every_way_to_fail_ends_the_episode_with_reward_zero(
    actions: list[str], observation: str
) -> None:
    episode = HouseholdEnvironment().episode(1)
    goal = episode.goal_box
    wrong = next(n for n in (1, 2, 3) if n != goal)
    names = {"goal": goal, "wrong": wrong, "obj": episode.goal, "x": episode.contents[wrong - 1]}
    steps = _play(episode, [a.format(**names) for a in actions])
    assert [done for _, _, done in steps] == [False] * (len(steps) - 1) + [True]
    assert steps[-1] == (observation.format(**names), 0.0, True)
    assert sum(reward for _, reward, _ in steps) == 0.0
    with pytest.raises(RuntimeError, match="after the episode ended"):
        episode.step("open 1")


@given(
    seed=st.integers(0, 10_000),
    index=st.integers(0, 10_000),
    boxes=st.integers(2, len(OBJECTS)),
)
def test_the_expert_always_succeeds_within_the_turn_limit(
    seed: int, index: int, boxes: int
) -> None:
    env = HouseholdEnvironment(seed=seed, boxes=boxes)
    episode = env.episode(index)
    total, turns = 0.0, 0
    for _ in range(env.max_turns):
        step = episode.step(episode.expert_action())
        total += step.reward
        turns += 1
        if step.done:
            break
    assert total == 1.0
    assert turns <= boxes + 1
    assert len(set(episode.opened)) == len(episode.opened)  # the expert never re-opens


def test_max_turns_from_the_job_overrides_the_default_limit() -> None:
    assert _env().max_turns == 4
    assert _env(max_turns=2).max_turns == 2
    assert get_task(TaskSpec(name="household", params={"boxes": 5})).max_turns == 6


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (TaskSpec(name="household", params={"boxes": 1}), "params.boxes must be an integer 2..9"),
        (TaskSpec(name="household", params={"boxes": "3"}), "params.boxes must be an integer"),
        (TaskSpec(name="household", params={"rooms": 2}), "unknown household settings"),
        (TaskSpec(name="arithmetic", max_turns=3), "maxTurns: arithmetic is single-turn"),
    ],
)
def test_bad_settings_name_the_field(spec: TaskSpec, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_task(spec)
