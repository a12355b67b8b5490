"""The long-tail task: response lengths that follow the stated heavy-tailed distribution,
drawn deterministically per trajectory, with the arithmetic task's prompts and reward."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.api.job import TaskSpec
from dressage.tasks import get_task, task_names
from dressage.tasks.arithmetic import ArithmeticTask
from dressage.tasks.base import has_fixed_lengths
from dressage.tasks.long_tail import LengthDistribution, LongTailTask

N_PROMPTS = 1500
GROUP = 8


def _lengths(task: LongTailTask) -> list[int]:
    return [task.response_tokens(i, m) for i in range(N_PROMPTS) for m in range(GROUP)]


def test_lengths_follow_the_stated_distribution_by_a_kolmogorov_smirnov_bound() -> None:
    task = LongTailTask(seed=0)
    lengths = _lengths(task)
    n = len(lengths)
    distance = 0.0
    for k in range(task.lengths.min_tokens - 1, task.lengths.max_tokens + 1):
        empirical = sum(1 for x in lengths if x <= k) / n
        distance = max(distance, abs(empirical - task.lengths.lengths_cdf(k)))
    # The KS critical value at a 0.1 % level is 1.95 / sqrt(n); the draws are seeded, so this
    # holds or fails deterministically.
    assert distance < 1.95 / math.sqrt(n), distance


def test_five_percent_of_responses_sit_in_a_tail_at_twenty_times_the_median() -> None:
    lengths = _lengths(LongTailTask(seed=1))
    median = statistics.median(lengths)
    assert median == 8
    tail = [x for x in lengths if x >= 10 * median]
    assert 0.04 <= len(tail) / len(lengths) <= 0.06
    assert 140 <= statistics.median(tail) <= 180  # 20x the median
    assert max(lengths) / median >= 25  # heavy: the longest are 25-40x the median


def test_the_exact_cdf_is_a_distribution_over_the_clipped_range() -> None:
    lengths = LengthDistribution()
    values = [lengths.lengths_cdf(k) for k in range(0, lengths.max_tokens + 2)]
    assert all(a <= b for a, b in itertools.pairwise(values))
    assert lengths.lengths_cdf(lengths.min_tokens - 1) == 0.0
    assert lengths.lengths_cdf(lengths.max_tokens) == 1.0
    # By hand: P(L <= 8) = P(X < 8.5) = 0.95 * Phi(ln(8.5 / 8) / 0.35) = 0.95 * Phi(0.1732).
    assert lengths.lengths_cdf(8) == pytest.approx(0.95 * 0.56876, abs=1e-4)


@given(
    seed=st.integers(0, 10**6),
    index=st.integers(0, 10**6),
    member=st.integers(0, 63),
    size=st.integers(1, 5000),
)
def test_a_budget_is_a_pure_function_of_seed_prompt_and_member(
    seed: int, index: int, member: int, size: int
) -> None:
    task = LongTailTask(seed=seed, dataset_size=size)
    budget = task.response_tokens(index, member)
    assert task.lengths.min_tokens <= budget <= task.lengths.max_tokens
    assert LongTailTask(seed=seed, dataset_size=size).response_tokens(index, member) == budget
    assert task.response_tokens(index + size, member) == budget  # cycles with the prompts


def test_members_of_one_group_get_lengths_of_their_own() -> None:
    task = LongTailTask()
    assert len({tuple(task.response_tokens(i, m) for m in range(GROUP)) for i in range(50)}) > 1
    assert any(len({task.response_tokens(i, m) for m in range(GROUP)}) > 1 for i in range(50))


def test_prompts_and_reward_are_the_arithmetic_tasks() -> None:
    task = LongTailTask(seed=2, max_operand=9)
    arithmetic = ArithmeticTask(seed=2, max_operand=9)
    assert [task.prompt(i) for i in range(30)] == [arithmetic.prompt(i) for i in range(30)]
    prompt = task.prompt(0)
    assert task.reward(prompt, prompt.answer) == 1.0
    assert task.reward(prompt, prompt.answer + "9") == 0.0


def test_the_registry_builds_it_from_the_jobs_params() -> None:
    assert "long_tail" in task_names()
    spec = TaskSpec(
        name="long_tail",
        seed=5,
        params={
            "maxOperand": 9,
            "medianTokens": 6,
            "sigma": 0.5,
            "tailProbability": 0.1,
            "tailFactor": 30,
            "tailSigma": 0.1,
            "minTokens": 2,
            "maxTokens": 400,
        },
    )
    task = get_task(spec)
    assert isinstance(task, LongTailTask)
    assert has_fixed_lengths(task)
    assert task.max_operand == 9
    assert task.max_response_tokens == 400
    assert task.lengths == LengthDistribution(6.0, 0.5, 0.1, 30.0, 0.1, 2, 400)
    assert not has_fixed_lengths(get_task(TaskSpec()))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"bogus": 1}, r"unknown long_tail settings \['bogus'\]"),
        ({"medianTokens": "x"}, "medianTokens must be a number"),
        ({"maxTokens": 2.5}, "maxTokens must be an integer"),
        ({"tailProbability": 1.5}, r"tailProbability must be in \[0, 1\]"),
        ({"minTokens": 10, "maxTokens": 5}, "maxTokens must be >= minTokens"),
        ({"tailFactor": 0.5}, "tailFactor must be >= 1"),
    ],
)
def test_bad_params_name_the_field(params: dict[str, int | float | str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_task(TaskSpec(name="long_tail", params=params))


def test_it_is_single_turn() -> None:
    with pytest.raises(ValueError, match=r"spec\.task\.maxTurns: long_tail is single-turn"):
        get_task(TaskSpec(name="long_tail", max_turns=3))
