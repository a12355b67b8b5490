"""A blackbox agent program that crashes fails its group as the user's code: the exception and
the program's own line come from the Python traceback on its standard error; a refusal by the
proxy stays the proxy's."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import pytest

from dressage.agents.blackbox import AGENT_ERROR, BlackboxRollout
from dressage.api.job import TaskSpec
from dressage.proxy.client import ProxyRolloutClient, RolloutError, SamplingSettings
from dressage.tasks import get_task
from dressage.tasks.dataset import DatasetTask
from dressage.tasks.faults import AGENT_FIELD, UserCodeFailed

pytestmark = pytest.mark.integration

AGENT = """\
import json, sys


def answer(question):
    return json.loads(question)["text"]


print(answer(sys.stdin.read()))
"""


class Proxy:
    """The proxy calls a blackbox rollout makes, answered in memory."""

    def __init__(self, refusal: str | None = None) -> None:
        self.refused = refusal

    def session_base_url(self, session_id: str, *, instance_id: str) -> str:
        return f"http://127.0.0.1:9/s/{session_id}/v1"

    async def create_session(self, session_id: str, instance_id: str) -> None:
        return None

    async def finalize(self, session_id: str, reward: float, *, instance_id: str) -> None:
        raise AssertionError("a failed trajectory is not finalized")

    async def segments(self, group_id: str) -> list[Any]:
        return []

    async def discard(self, session_id: str, *, instance_id: str) -> None:
        return None

    async def refusal(self, session_id: str, *, instance_id: str) -> str | None:
        return self.refused


def _rollout(tmp_path: Path, proxy: Proxy) -> tuple[BlackboxRollout, Path]:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"q": "not json", "a": "4"}) + "\n")
    task = get_task(
        TaskSpec.model_validate(
            {
                "name": "dataset",
                "dataset": {"path": str(data), "promptColumn": "q", "answerColumn": "a"},
            }
        )
    )
    assert isinstance(task, DatasetTask)
    program = tmp_path / "solver.py"
    program.write_text(textwrap.dedent(AGENT))
    rollout = BlackboxRollout(
        command=[sys.executable, str(program)],
        task=task,
        client=cast(ProxyRolloutClient, proxy),
        group_size=2,
        sampling=SamplingSettings(max_new_tokens=4),
    )
    return rollout, program


async def test_a_crashing_program_is_named_with_its_exception_and_line(tmp_path: Path) -> None:
    rollout, program = _rollout(tmp_path, Proxy())
    with pytest.raises(UserCodeFailed) as failed:
        await rollout(0, 0)
    fault = failed.value.fault
    assert (failed.value.reason, fault.field) == (AGENT_ERROR, AGENT_FIELD)
    assert fault.reference == f"{sys.executable} {program}"
    assert fault.error_type == "JSONDecodeError"
    assert fault.frame is not None
    assert (Path(fault.frame.file), fault.frame.line, fault.frame.function) == (
        program,
        5,
        "answer",
    )
    assert fault.frame.code == 'return json.loads(question)["text"]'
    # Both trajectories crashed the same way: one distinct error, two occurrences.
    assert [e.count for e in rollout.faults.entries()] == [2]


async def test_a_program_the_proxy_refused_is_the_proxys_failure(tmp_path: Path) -> None:
    rollout, _ = _rollout(tmp_path, Proxy(refusal="partial_rollout_staleness_exceeded"))
    with pytest.raises(RolloutError) as failed:
        await rollout(0, 0)
    assert not isinstance(failed.value, UserCodeFailed)
    assert failed.value.staleness
    assert rollout.faults.entries() == []
