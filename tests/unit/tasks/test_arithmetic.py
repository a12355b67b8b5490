"""The arithmetic task: deterministic prompts from the job's seed and an exact-match reward."""

from __future__ import annotations

import pytest

from dressage.api.job import TASK_NAMES, TaskSpec
from dressage.tasks import get_task, task_names
from dressage.tasks.arithmetic import ArithmeticTask, extract_answer


def test_prompts_are_a_pure_function_of_seed_and_index() -> None:
    a = get_task(TaskSpec(seed=3))
    b = get_task(TaskSpec(seed=3))
    assert [a.prompt(i) for i in range(20)] == [b.prompt(i) for i in range(20)]
    other = get_task(TaskSpec(seed=4))
    assert [a.prompt(i).text for i in range(20)] != [other.prompt(i).text for i in range(20)]


def test_prompt_stream_cycles_every_dataset_size() -> None:
    task = get_task(TaskSpec(dataset_size=5))
    assert task.prompt(7).text == task.prompt(2).text
    assert task.prompt(7).index == 7


def test_prompt_text_and_answer_agree() -> None:
    task = ArithmeticTask(seed=1, max_operand=9)
    for i in range(50):
        p = task.prompt(i)
        a, b = (int(x) for x in p.text.removesuffix("=").split("+"))
        assert 0 <= a <= 9
        assert 0 <= b <= 9
        assert p.answer == str(a + b)


@pytest.mark.parametrize(
    ("completion", "reward"),
    [("42", 1.0), (" 42", 1.0), ("42\n", 1.0), ("421", 0.0), ("4", 0.0), ("", 0.0), ("x42", 0.0)],
)
def test_reward_is_exact_match_of_the_leading_number(completion: str, reward: float) -> None:
    task = ArithmeticTask()
    prompt = next(task.prompt(i) for i in range(1000) if task.prompt(i).answer == "42")
    assert task.reward(prompt, completion) == reward


def test_extract_answer() -> None:
    assert extract_answer("  17abc") == "17"
    assert extract_answer("abc") is None


def test_params_configure_the_operand_range() -> None:
    task = get_task(TaskSpec(params={"maxOperand": 3}))
    assert isinstance(task, ArithmeticTask)
    assert task.max_operand == 3


@pytest.mark.parametrize(
    ("params", "message"),
    [({"maxOperand": "x"}, "maxOperand must be an integer"), ({"bogus": 1}, "unknown arithmetic")],
)
def test_bad_params_name_the_field(params: dict[str, int | str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_task(TaskSpec(params=params))


def test_the_registry_holds_exactly_the_task_names_the_job_model_accepts() -> None:
    assert task_names() == sorted(TASK_NAMES)
    with pytest.raises(ValueError, match=r"unknown task 'chess'.*known tasks are arithmetic"):
        TaskSpec(name="chess")
