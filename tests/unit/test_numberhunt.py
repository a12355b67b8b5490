"""The number-hunt environment: rules, rewards, and the bisecting expert."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.envs.numberhunt import NumberHunt, expert_actions


def test_probe_answers_direction_and_answer_ends() -> None:
    env, obs = NumberHunt.reset(seed=3, size=8, max_turns=4)
    assert "0-7" in obs
    target = env.target
    probe = env.step(f"probe {min(target + 1, 7)}")
    assert probe.reward == 0.0
    assert probe.observation in {"lower\n", "found\n"}
    final = env.step(f"answer {target}")
    assert (final.reward, final.done) == (1.0, True)
    with pytest.raises(RuntimeError):
        env.step("answer 1")


def test_bad_action_and_running_out_of_turns_end_with_zero() -> None:
    env, _ = NumberHunt.reset(seed=1)
    result = env.step("look around")
    assert (result.observation, result.reward, result.done) == ("bad action\n", 0.0, True)
    env, _ = NumberHunt.reset(seed=1, max_turns=1)
    result = env.step("probe 0")
    assert result.done
    assert result.reward == 0.0
    assert "out of turns" in result.observation


@given(st.integers(min_value=0, max_value=10_000), st.sampled_from([2, 5, 8, 16]))
def test_expert_always_wins_within_bisection_budget(seed: int, size: int) -> None:
    budget = (size - 1).bit_length() + 1
    env, _ = NumberHunt.reset(seed, size=size, max_turns=budget)
    results = [env.step(a) for a in expert_actions(env.target, size)]
    assert results[-1].reward == 1.0
    assert len(results) <= budget
