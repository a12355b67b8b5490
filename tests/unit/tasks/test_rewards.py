"""Rewards as code: a function named by import path gets the completion and the dataset row;
named parts become the weighted sum; a reward that raises, hangs or returns junk gives 0 and
is counted by reason, or stops the run; the built-ins check exact and mathematical answers."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dressage.api.job import TaskSpec
from dressage.tasks import get_task
from dressage.tasks.base import Scored
from dressage.tasks.dataset import DatasetTask
from dressage.tasks.rewards import (
    REWARD_INVALID,
    REWARD_RAISED,
    REWARD_TIMEOUT,
    RewardError,
    RewardFunction,
    math_answer,
)
from dressage.tasks.usercode import UserCodeError

ROWS = [
    {"q": "2+2=", "a": "4", "unit": "apples", "noise": 1},
    {"q": "3+3=", "a": "6", "unit": "pears", "noise": 2},
]

USER_REWARDS = """
import asyncio
import threading

CALLS = []
RELEASE = threading.Event()

def scored(completion, row):
    CALLS.append((completion, dict(row)))
    return 1.0 if completion.strip() == row["a"] + " " + row["unit"] else 0.0

async def scored_async(completion, row):
    await asyncio.sleep(0)
    return float(completion == row["a"])

def parts(completion, row):
    return {"correct": float(completion == row["a"]), "short": 1.0 - len(completion) / 10}

def batch(completions, rows):
    CALLS.append(len(completions))
    return [float(c == r["a"]) for c, r in zip(completions, rows)]

def raises(completion, row):
    raise KeyError("no such column")

def hangs(completion, row):
    RELEASE.wait(30)
    return 1.0

def junk(completion, row):
    return "one"
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    name = f"user_rewards_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_REWARDS), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    module = importlib.import_module(name)
    yield module
    module.RELEASE.set()
    sys.modules.pop(name, None)


def _task(tmp_path: Path, reward: str, **task: Any) -> DatasetTask:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    spec = TaskSpec.model_validate(
        {
            "name": "dataset",
            "dataset": {
                "path": str(path),
                "promptColumn": "q",
                "answerColumn": "a",
                "rewardColumns": ["unit"],
            },
            "reward": reward,
            **task,
        }
    )
    built = get_task(spec)
    assert isinstance(built, DatasetTask)
    return built


def _ref(module: Any, name: str) -> str:
    return f"{module.__name__}:{name}"


def test_a_reward_by_import_path_gets_the_completion_and_the_row(
    tmp_path: Path, user_module: Any
) -> None:
    task = _task(tmp_path, _ref(user_module, "scored"))
    assert task.reward(task.prompt(1), "6 pears") == 1.0
    assert task.reward(task.prompt(2), "4 pears") == 0.0
    assert user_module.CALLS == [
        ("6 pears", {"unit": "pears", "a": "6"}),
        ("4 pears", {"unit": "apples", "a": "4"}),
    ]


async def test_an_async_reward_is_awaited(tmp_path: Path, user_module: Any) -> None:
    task = _task(tmp_path, _ref(user_module, "scored_async"))
    assert await task.areward(task.prompt(0), "4") == 1.0
    assert task.reward(task.prompt(0), "5") == 0.0  # also from synchronous callers


def test_named_parts_become_the_weighted_sum_and_their_means_are_kept(
    tmp_path: Path, user_module: Any
) -> None:
    task = _task(tmp_path, _ref(user_module, "parts"), rewardWeights={"correct": 1.0, "short": 0.5})
    assert task.reward(task.prompt(0), "4") == pytest.approx(1.0 + 0.5 * 0.9)
    assert task.reward(task.prompt(0), "44") == pytest.approx(0.5 * 0.8)
    stats = task.reward_stats.snapshot()
    assert stats["samples"] == 2
    assert stats["parts"] == pytest.approx({"correct": 0.5, "short": 0.85})


def test_unweighted_parts_are_summed(tmp_path: Path, user_module: Any) -> None:
    task = _task(tmp_path, _ref(user_module, "parts"))
    assert task.reward(task.prompt(0), "4") == pytest.approx(1.9)


def test_a_weighted_part_the_reward_does_not_return_is_invalid(
    tmp_path: Path, user_module: Any
) -> None:
    task = _task(tmp_path, _ref(user_module, "parts"), rewardWeights={"style": 1.0})
    assert task.reward(task.prompt(0), "4") == 0.0
    assert task.reward_stats.snapshot()["failures"] == {REWARD_INVALID: 1}


def test_a_batched_reward_gets_lists(tmp_path: Path, user_module: Any) -> None:
    task = _task(tmp_path, _ref(user_module, "batch"), rewardBatched=True)
    prompts = [task.prompt(0), task.prompt(1), task.prompt(2)]
    assert task.rewards(prompts, ["4", "7", "4"]) == [1.0, 0.0, 1.0]
    assert task.reward(task.prompt(1), "6") == 1.0
    assert user_module.CALLS == [3, 1]


@pytest.mark.parametrize(
    ("function", "reason", "message"),
    [
        ("raises", REWARD_RAISED, "raised KeyError: 'no such column'"),
        ("junk", REWARD_INVALID, "result 'one' is not a finite number"),
    ],
)
def test_a_failing_reward_gives_zero_and_is_counted_by_reason(
    tmp_path: Path,
    user_module: Any,
    caplog: pytest.LogCaptureFixture,
    function: str,
    reason: str,
    message: str,
) -> None:
    task = _task(tmp_path, _ref(user_module, function))
    assert [task.reward(task.prompt(i), "4") for i in range(3)] == [0.0, 0.0, 0.0]
    assert task.reward_stats.snapshot()["failures"] == {reason: 3}
    assert message in caplog.text
    assert _ref(user_module, function) in caplog.text


def test_a_hanging_reward_times_out_with_zero(tmp_path: Path, user_module: Any) -> None:
    task = _task(tmp_path, _ref(user_module, "hangs"), rewardTimeoutSeconds=0.05)
    assert task.reward(task.prompt(0), "4") == 0.0
    assert task.reward_stats.snapshot()["failures"] == {REWARD_TIMEOUT: 1}


async def test_a_hanging_reward_times_out_without_blocking_the_loop(
    tmp_path: Path, user_module: Any
) -> None:
    task = _task(tmp_path, _ref(user_module, "hangs"), rewardTimeoutSeconds=0.05)
    assert await task.areward(task.prompt(0), "4") == 0.0
    assert task.reward_stats.snapshot()["failures"] == {REWARD_TIMEOUT: 1}


def test_on_reward_error_stop_raises_and_keeps_raising(tmp_path: Path, user_module: Any) -> None:
    task = _task(tmp_path, _ref(user_module, "raises"), onRewardError="stop")
    with pytest.raises(RewardError, match=r"reward_raised: spec\.task\.reward .* raised KeyError"):
        task.reward(task.prompt(0), "4")
    with pytest.raises(RewardError) as second:
        task.reward(task.prompt(1), "6")
    assert second.value.reason == REWARD_RAISED


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_colon", "not an import path of the form 'package.module:name'"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("json:no_such_function", "module 'json' .* has no attribute 'no_such_function'"),
        ("json:__doc__", "is not callable"),
    ],
)
def test_a_reward_that_cannot_be_imported_names_the_import_path(
    tmp_path: Path, reference: str, message: str
) -> None:
    with pytest.raises(ValueError, match=f"spec.task.reward: .*{message}") as info:
        _task(tmp_path, reference)
    assert isinstance(info.value, UserCodeError) or "callable" in message


def test_exact_match_ignores_surrounding_whitespace(tmp_path: Path) -> None:
    task = _task(tmp_path, "exact_match")
    assert task.reward(task.prompt(0), " 4\n") == 1.0
    assert task.reward(task.prompt(0), "4.0") == 0.0


@pytest.mark.parametrize(
    ("answer", "completion", "expected"),
    [
        ("4", "The answer is 4.", 1.0),
        ("4", "The answer is 5.", 0.0),
        ("0.5", "$\\frac{1}{2}$", 1.0),
        ("\\frac{3}{4}", "so we get \\boxed{0.75}", 1.0),
        ("12", "no number here", 0.0),
    ],
)
def test_math_checks_answers_with_math_verify(
    answer: str, completion: str, expected: float
) -> None:
    pytest.importorskip("math_verify")
    assert math_answer("a")(completion, {"a": answer}) == expected


def test_math_runs_under_the_timeout_off_the_main_thread(tmp_path: Path) -> None:
    pytest.importorskip("math_verify")
    task = _task(tmp_path, "math")
    results: list[float] = []
    worker = threading.Thread(target=lambda: results.append(task.reward(task.prompt(1), "6")))
    worker.start()
    worker.join()
    assert results == [1.0]
    assert task.reward_stats.snapshot()["failures"] == {}


def test_a_built_in_reward_needs_the_answer_column() -> None:
    spec = TaskSpec.model_validate(
        {"name": "dataset", "dataset": {"path": "x", "promptColumn": "q"}, "reward": "math"}
    )
    with pytest.raises(ValueError, match=r"set spec\.task\.dataset\.answerColumn"):
        RewardFunction.from_spec(spec, None)


async def test_each_sample_is_scored_with_its_own_parts_and_failure(
    tmp_path: Path, user_module: Any
) -> None:
    # What travels with a sample to the trainer, so a step reports its own batch's parts.
    task = _task(tmp_path, _ref(user_module, "parts"), rewardWeights={"correct": 1.0})
    right = await task.ascored(task.prompt(0), "4")
    wrong = await task.ascored(task.prompt(0), "55")
    assert right == Scored(1.0, {"correct": 1.0, "short": pytest.approx(0.9)})
    assert wrong == Scored(0.0, {"correct": 0.0, "short": pytest.approx(0.8)})
    failing = _task(tmp_path, _ref(user_module, "junk"))
    assert await failing.ascored(failing.prompt(0), "4") == Scored(0.0, failure=REWARD_INVALID)
    assert right.metadata() == {"reward_parts": {"correct": 1.0, "short": pytest.approx(0.9)}}
    assert Scored(0.0, failure=REWARD_INVALID).metadata() == {"reward_failure": REWARD_INVALID}
    assert Scored(1.0).metadata() == {}
