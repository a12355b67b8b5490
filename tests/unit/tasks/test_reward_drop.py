"""`spec.task.onRewardError: drop`: a reward or environment failure that is the
infrastructure's (a timeout, an unreachable service, a crashed sandbox) drops the sample's
whole GRPO group, unretried and counted by reason, instead of a 0 that would bend the group's
statistics; a failure that is the code's own still scores 0; the retry policy counts the drop
and opens its breaker when every group is dropped."""

from __future__ import annotations

import logging
import pickle
import threading
from typing import Any

import pytest

from dressage.agents.whitebox import WhiteboxAgentRollout
from dressage.api.job import TaskSpec
from dressage.data.groups import Group
from dressage.rollout.retry import GroupAttempts, RetryPolicy
from dressage.rollout.stats import CollectorStats
from dressage.tasks import InfrastructureError
from dressage.tasks.faults import UserCodeFailed, UserCodeFault, UserCodeFaults
from dressage.tasks.infrastructure import is_infrastructure
from dressage.tasks.rewards import REWARD_RAISED, REWARD_TIMEOUT, RewardFunction

ROW = {"answer": "4"}


class SandboxDied(Exception):
    """A library's error, marked without importing Dressage."""

    dressage_infrastructure = True


def _raised_from(cause: BaseException) -> Exception:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise RuntimeError("grading failed") from exc
    except RuntimeError as outer:
        return outer


def _marked() -> Exception:
    exc = ValueError("one call")
    exc.dressage_infrastructure = True  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    ("exc", "infrastructure"),
    [
        (TimeoutError("grader timed out"), True),
        (ConnectionRefusedError(111, "refused"), True),
        (ConnectionResetError(), True),
        (InfrastructureError("sandbox crashed"), True),
        (SandboxDied("exit 137"), True),
        (_marked(), True),
        (_raised_from(ConnectionError("unreachable")), True),
        (KeyError("answer"), False),
        (ValueError("not a number"), False),
        (_raised_from(ZeroDivisionError()), False),
        (FileNotFoundError("rows.jsonl"), False),  # an OSError, but the job's own
    ],
)
def test_what_counts_as_the_infrastructures_failure(exc: Exception, infrastructure: bool) -> None:
    assert is_infrastructure(exc) is infrastructure


def _reward(fn: Any, on_error: str = "drop", **settings: Any) -> RewardFunction:
    return RewardFunction(
        fn, name="rewards:score", on_error=on_error, faults=UserCodeFaults(), **settings
    )


def _times_out(completion: str, row: Any) -> float:
    raise TimeoutError("grader timed out")


def _key_error(completion: str, row: Any) -> float:
    return float(row["solution"])


async def test_an_infrastructure_failure_drops_the_group_and_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    reward = _reward(_times_out)
    with pytest.raises(UserCodeFailed) as dropped:
        await reward.ascored(["4"], [ROW])
    assert dropped.value.dropped == "reward_error"
    assert dropped.value.reason == REWARD_RAISED
    assert reward.stats.snapshot()["failures"] == {REWARD_RAISED: 1}
    assert [e.count for e in reward.faults.entries()] == [1]
    assert "prompt group is dropped (spec.task.onRewardError: drop)" in caplog.text
    # It crosses the rollout process's boundary with its drop reason.
    assert pickle.loads(pickle.dumps(dropped.value)).dropped == "reward_error"


async def test_a_reward_call_past_its_timeout_drops_the_group() -> None:
    release = threading.Event()

    def hangs(completion: str, row: Any) -> float:
        release.wait(30)
        return 1.0

    reward = _reward(hangs, timeout_s=0.05)
    try:
        with pytest.raises(UserCodeFailed) as dropped:
            await reward.ascored(["4"], [ROW])
    finally:
        release.set()
    assert (dropped.value.reason, dropped.value.dropped) == (REWARD_TIMEOUT, "reward_error")


@pytest.mark.parametrize("on_error", ["zero", "drop"])
async def test_the_codes_own_failure_still_scores_zero(on_error: str) -> None:
    reward = _reward(_key_error, on_error)
    (scored,) = await reward.ascored(["4"], [ROW])
    assert (scored.value, scored.failure) == (0.0, REWARD_RAISED)


async def test_under_zero_an_infrastructure_failure_scores_zero_as_before() -> None:
    reward = _reward(_times_out, "zero")
    (scored,) = await reward.ascored(["4"], [ROW])
    assert (scored.value, scored.failure) == (0.0, REWARD_RAISED)


def test_outside_rollout_an_infrastructure_failure_scores_zero() -> None:
    assert _reward(_times_out).score(["4"], [ROW]) == [0.0]


def test_the_job_model_accepts_drop_and_zero_stays_the_default() -> None:
    assert TaskSpec().on_reward_error == "zero"
    assert TaskSpec.model_validate({"onRewardError": "drop"}).on_reward_error == "drop"


FAULT = UserCodeFault("spec.task.reward", "rewards:score", REWARD_TIMEOUT, "no result within 1 s")


async def _no_sleep(seconds: float) -> None:
    return None


async def test_a_dropped_group_is_not_retried_and_is_counted_by_its_drop_reason() -> None:
    calls: list[tuple[int, int]] = []

    async def rollout(index: int, attempt: int) -> Group:
        calls.append((index, attempt))
        if index == 0:
            raise UserCodeFailed(FAULT, dropped="reward_error")
        return Group(group_id=f"g{index}", samples=())

    stats = CollectorStats()
    attempts = GroupAttempts(rollout, RetryPolicy(max_retries=3), stats, sleep=_no_sleep)
    assert await attempts.run(0) is None
    assert await attempts.run(1) is not None
    assert calls == [(0, 0), (1, 0)]
    assert stats.totals.dropped_groups == {"reward_error": 1}
    assert stats.totals.failed_attempts == {REWARD_TIMEOUT: 1}
    assert stats.totals.retries == 0
    assert attempts.broken is None


async def test_when_every_group_is_dropped_the_breaker_opens_naming_how() -> None:
    async def rollout(index: int, attempt: int) -> Group:
        raise UserCodeFailed(FAULT, dropped="reward_error")

    stats = CollectorStats()
    policy = RetryPolicy(max_retries=3, breaker_after=3)
    attempts = GroupAttempts(rollout, policy, stats, sleep=_no_sleep)
    for index in range(3):
        assert await attempts.run(index) is None
    assert attempts.broken is not None
    message = str(attempts.broken)
    assert message.startswith(
        "rollout is failing: 3 prompt groups in a row were dropped (3 at once as reward_error); "
    )
    assert "User code failed: " in message


class _Flaky:
    name = "flaky"
    max_turns = 1

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def episode(self, index: int) -> Any:
        raise self.exc


@pytest.mark.parametrize(
    ("drop", "exc", "dropped"),
    [
        (True, ConnectionRefusedError(111, "sandbox unreachable"), "environment_error"),
        (True, KeyError("size"), None),  # the environment's own bug: retried, as before
        (False, ConnectionRefusedError(111, "sandbox unreachable"), None),
    ],
)
def test_an_environments_infrastructure_failure_drops_its_group_under_drop(
    drop: bool, exc: Exception, dropped: str | None
) -> None:
    agent = WhiteboxAgentRollout(
        environment=_Flaky(exc),
        codec=None,  # type: ignore[arg-type]
        client=None,  # type: ignore[arg-type]
        group_size=2,
        sampling=None,  # type: ignore[arg-type]
        drop_infrastructure_errors=drop,
    )
    with pytest.raises(UserCodeFailed) as failed:
        agent._episode(0)
    assert failed.value.dropped == dropped
    assert failed.value.reason == "environment_raised"
