"""A task that fixes response lengths, wired into a job's agent: the single-turn agent gets the
task's lengths, and jobs that cannot honour them are refused naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from dressage.agents.single_turn import SingleTurnRollout
from dressage.api.job import AsyncRLJobSpec
from dressage.orchestrator.collectors import group_rollout
from dressage.proxy.client import ProxyRolloutClient
from dressage.tasks import get_task
from dressage.tasks.codec import TaskPrompts
from dressage.tasks.faults import UserCodeFaults
from dressage.tasks.long_tail import LongTailTask


def _rollout(**spec: Any) -> object:
    job = AsyncRLJobSpec.model_validate({"model": {"source": "builtin:tiny"}, **spec})
    source = TaskPrompts(get_task(job.task), codec=None)  # type: ignore[arg-type]
    return group_rollout(
        job,
        source=source,
        proxy=ProxyRolloutClient("http://127.0.0.1:9"),
        run_tag="t",
        faults=UserCodeFaults(),
    )


def test_the_single_turn_agent_generates_the_tasks_length_for_each_trajectory() -> None:
    rollout = _rollout(task={"name": "long_tail"}, rollout={"maxNewTokens": 320})
    assert isinstance(rollout, SingleTurnRollout)
    assert rollout.lengths is not None
    assert [rollout.lengths(4, m) for m in range(8)] == [
        LongTailTask().response_tokens(4, m) for m in range(8)
    ]
    assert _rollout().lengths is None  # type: ignore[attr-defined]


def test_a_budget_that_could_cut_a_response_is_refused_naming_both_fields() -> None:
    with pytest.raises(ValueError, match=r"maxNewTokens \(64\).*320, its maxTokens"):
        _rollout(task={"name": "long_tail"}, rollout={"maxNewTokens": 64})


def test_a_blackbox_agent_cannot_take_fixed_lengths() -> None:
    with pytest.raises(ValueError, match=r"spec\.task\.agent: the long_tail task fixes"):
        _rollout(
            task={"name": "long_tail", "agent": "blackbox", "agentCommand": ["agent"]},
            rollout={"maxNewTokens": 320},
        )
