"""A dataset row reaches a blackbox agent program: its reward columns in `DRESSAGE_TASK_ROW`,
its chat messages in `DRESSAGE_TASK_MESSAGES`, the question on standard input."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from dressage.agents.blackbox import BlackboxRollout
from dressage.api.job import TaskSpec
from dressage.proxy.client import ProxyRolloutClient, SamplingSettings
from dressage.tasks import get_task
from dressage.tasks.dataset import DatasetTask

# Answers with the row's answer column and echoes what it was given to a side file.
AGENT = """
import json, os, sys
question = sys.stdin.read()
row = json.loads(os.environ["DRESSAGE_TASK_ROW"])
messages = json.loads(os.environ.get("DRESSAGE_TASK_MESSAGES", "null"))
with open(sys.argv[1], "w") as f:
    json.dump({"question": question, "row": row, "messages": messages}, f)
print(row["a"])
"""


@dataclass
class _Segment:
    """What the group's code reads of a fetched segment: its trajectory, its response tokens
    (the mask), its place in the trajectory and the version of its last token."""

    parent_traj_id: str
    loss_mask: tuple[int, ...] = (1,)
    segment_index: int = 0
    dressage_end_token_version: str | None = "v0"


class RecordingProxy:
    """The proxy calls a blackbox rollout makes, answered in memory."""

    def __init__(self) -> None:
        self.rewards: dict[str, float] = {}

    def session_base_url(self, session_id: str, *, instance_id: str) -> str:
        return f"http://127.0.0.1:9/s/{session_id}/v1"

    async def create_session(self, session_id: str, instance_id: str) -> None:
        return None

    async def finalize(self, session_id: str, reward: float, *, instance_id: str) -> None:
        self.rewards[session_id] = reward

    async def segments(self, group_id: str) -> list[Any]:
        return [_Segment(s) for s in self.rewards]

    async def discard(self, session_id: str, *, instance_id: str) -> None:
        return None

    async def refusal(self, session_id: str, *, instance_id: str) -> str | None:
        return None


async def test_the_agent_program_gets_the_row_and_the_messages(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"q": "2+2=", "a": "4", "hint": "even", "other": 1}) + "\n")
    spec = TaskSpec.model_validate(
        {
            "name": "dataset",
            "dataset": {
                "path": str(data),
                "promptColumn": "q",
                "answerColumn": "a",
                "rewardColumns": ["hint"],
                "systemPrompt": "Be brief.",
            },
        }
    )
    task = get_task(spec)
    assert isinstance(task, DatasetTask)
    seen = tmp_path / "seen.json"
    proxy = RecordingProxy()
    rollout = BlackboxRollout(
        command=[sys.executable, "-c", AGENT, str(seen)],
        task=task,
        client=cast(ProxyRolloutClient, proxy),
        group_size=1,
        sampling=SamplingSettings(max_new_tokens=4),
    )
    await rollout(0, 0)
    assert list(proxy.rewards.values()) == [1.0]
    assert json.loads(seen.read_text()) == {
        "question": "2+2=",
        "row": {"hint": "even", "a": "4"},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2="},
        ],
    }
