"""Evaluation runs through the job's own agent code: the whitebox multi-turn loop (household,
its held-out split) and a blackbox OpenAI-client program, over a real engine and proxy; every
counted group is the evaluated version's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from dressage_testkit.engine import start_engine
from dressage_testkit.proxy import start_proxy

from dressage.api import validate_job
from dressage.data.groups import Group
from dressage.evaluation.figures import single_version
from dressage.orchestrator.evaluations import build_evaluator
from dressage.proxy.client import ProxyRolloutClient
from dressage.tasks.codec import PromptCodec
from dressage.tasks.faults import UserCodeFaults
from tests.integration.proxy_support import tiny_checkpoint

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _job(task: dict[str, Any]) -> Any:
    return validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "j"},
            "spec": {
                "model": {"source": "builtin:tiny"},
                "task": task,
                "rollout": {"maxNewTokens": 6},
                "evaluation": {"prompts": 3, "samplesPerPrompt": 2, "temperature": 1.0},
            },
        }
    )


@pytest.mark.parametrize(
    "task",
    [
        {"name": "household", "params": {"boxes": 2}},
        {
            "name": "arithmetic",
            "params": {"maxOperand": 9},
            "agent": "blackbox",
            "agentCommand": [sys.executable, str(ROOT / "examples" / "agents" / "chat_solver.py")],
        },
    ],
    ids=["whitebox-multi-turn", "blackbox"],
)
async def test_evaluation_runs_the_jobs_agent_and_counts_one_version(
    task: dict[str, Any], cache_dir: Path
) -> None:
    counted: list[tuple[str, Group]] = []
    with (
        start_engine(cache_dir=cache_dir, weight_version="v7") as engine,
        start_proxy(
            [engine.base_url],
            "--dressage-partial-rollout",
            "--record-token-versions",
            "--model",  # the chat template, for the blackbox program's /v1/chat/completions
            str(tiny_checkpoint(cache_dir)),
        ) as proxy,
    ):
        client = ProxyRolloutClient(proxy.base_url)
        try:
            evaluator = build_evaluator(
                _job(task),
                proxy=client,
                codec=PromptCodec.from_pretrained(tiny_checkpoint(cache_dir)),
                faults=UserCodeFaults(),
            )
            evaluator.counted = lambda version, group: counted.append((version, group))
            evaluation = await evaluator.evaluate("v7", 7)
        finally:
            await client.aclose()
    assert (evaluation.version, evaluation.step, evaluation.prompts) == ("v7", 7, 3)
    assert set(evaluation.pass_at) == {1, 2}
    assert 0.0 <= evaluation.reward_mean <= 1.0
    assert len(counted) == 3
    for version, group in counted:
        assert single_version(group.samples, version)
        assert len({s.parent_traj_id for s in group.samples}) == 2
