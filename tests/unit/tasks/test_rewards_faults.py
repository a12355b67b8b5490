"""A reward's failures reach the user: the first occurrence of each distinct error is logged
with the user line that raised it, `onRewardError: stop` raises the fault itself, and a dry
call (the pre-flight's) computes a reward without counting anything."""

from __future__ import annotations

import importlib
import logging
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dressage.tasks.faults import UserCodeFaults
from dressage.tasks.rewards import REWARD_RAISED, STOP_SETTING, RewardError, RewardFunction
from dressage.tasks.usercode import UserCodeError

USER_REWARDS = """\
import threading

RELEASE = threading.Event()


def strict(completion, row):
    return float(as_number(completion) == int(row["answer"]))


def as_number(text):
    return int(text.strip())


def parts(completion, row):
    return {"correct": float(completion == row["answer"])}


def hangs(completion, row):
    RELEASE.wait(30)
    return 1.0
"""
ROW = {"answer": "4"}


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    name = f"user_reward_faults_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_REWARDS), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    module = importlib.import_module(name)
    yield module
    module.RELEASE.set()
    sys.modules.pop(name, None)


def _reward(module: Any, name: str, **settings: Any) -> RewardFunction:
    return RewardFunction(
        getattr(module, name), name=f"{module.__name__}:{name}", faults=UserCodeFaults(), **settings
    )


def test_a_failing_reward_is_logged_once_with_the_line_that_raised(
    user_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    reward = _reward(user_module, "strict")
    with caplog.at_level(logging.WARNING):
        assert [reward.score([c], [ROW])[0] for c in ("four", "4", "x")] == [0.0, 1.0, 0.0]
    (logged,) = [r.getMessage() for r in caplog.records]
    assert logged.splitlines() == [
        f"user code failed: spec.task.reward {user_module.__name__}:strict raised ValueError: "
        f"invalid literal for int() with base 10: 'four' (at {user_module.__file__}:11, in "
        "as_number)",
        "    return int(text.strip())",
        "  the sample gets reward 0 (spec.task.onRewardError: zero); later occurrences of this "
        "error are counted, not logged",
    ]
    assert reward.stats.snapshot()["failures"] == {REWARD_RAISED: 2}
    ((fault, count),) = [(e.fault, e.count) for e in reward.faults.entries()]
    assert count == 2
    assert (fault.error_type, fault.frame and fault.frame.function) == ("ValueError", "as_number")


def test_stop_raises_the_fault_and_says_which_setting_stops_the_run(user_module: Any) -> None:
    reward = _reward(user_module, "strict", on_error="stop")
    with pytest.raises(RewardError) as stopped:
        reward.score(["four"], [ROW])
    assert stopped.value.stop == STOP_SETTING
    assert stopped.value.fault.frame is not None
    assert stopped.value.fault.frame.function == "as_number"
    assert "raised ValueError: invalid literal for int()" in str(stopped.value)


def test_a_dry_call_counts_nothing(user_module: Any) -> None:
    reward = _reward(user_module, "parts")
    assert reward.dry_run("4", ROW) == 1.0
    assert reward.stats.snapshot() == {"samples": 0, "failures": {}, "parts": {}}
    assert reward.faults.entries() == []


def test_a_failing_dry_call_names_the_fault_its_line_and_the_call(user_module: Any) -> None:
    reward = _reward(user_module, "strict", on_error="stop")
    with pytest.raises(UserCodeError) as failed:
        reward.dry_run("four", ROW, where="dry-called on d.jsonl line 1")
    assert str(failed.value).splitlines() == [
        f"spec.task.reward {user_module.__name__}:strict raised ValueError: invalid literal for "
        f"int() with base 10: 'four' (at {user_module.__file__}:11, in as_number), dry-called "
        "on d.jsonl line 1",
        "    return int(text.strip())",
    ]
    assert reward.stopped is None  # onRewardError does not apply to a dry call
    assert reward.faults.entries() == []


def test_a_dry_call_that_overruns_is_a_timeout(user_module: Any) -> None:
    reward = _reward(user_module, "hangs", timeout_s=0.05)
    with pytest.raises(UserCodeError, match=r"hangs: no result within 0\.05 s"):
        reward.dry_run("4", ROW)


def test_a_weighted_part_missing_from_the_dry_call_is_invalid(user_module: Any) -> None:
    reward = _reward(user_module, "parts", weights={"corect": 1.0})
    with pytest.raises(UserCodeError, match=r"lacks the weighted parts \['corect'\]"):
        reward.dry_run("4", ROW)


def test_calls_from_many_threads_log_one_line(
    user_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    reward = _reward(user_module, "strict")
    with caplog.at_level(logging.WARNING):
        threads = [threading.Thread(target=reward.score, args=(["x"], [ROW])) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert len(caplog.records) == 1
    assert [e.count for e in reward.faults.entries()] == [8]
