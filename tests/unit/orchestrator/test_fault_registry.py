"""The run's registry of user-code faults is handed to what records faults: no process-wide
registry, so two runs in one process (tests, a notebook) keep their faults apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dressage.agents.whitebox import WhiteboxAgentRollout
from dressage.api.job import AsyncRLJobSpec, TaskSpec
from dressage.model.tokenizer import build_tokenizer_files
from dressage.orchestrator.collectors import group_rollout, make_collector
from dressage.proxy.client import ProxyRolloutClient
from dressage.tasks import get_task
from dressage.tasks.codec import PromptCodec, TaskPrompts
from dressage.tasks.dataset import DatasetTask
from dressage.tasks.faults import UserCodeFaults


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> PromptCodec:
    out = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer_files(out)
    return PromptCodec.from_pretrained(out)


def _dataset_task(tmp_path: Path) -> DatasetTask:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"q": "1+1=", "a": "2"}) + "\n")
    task = get_task(
        TaskSpec.model_validate(
            {
                "name": "dataset",
                "dataset": {"path": str(path), "promptColumn": "q", "answerColumn": "a"},
                "reward": "math",  # raises on an answer it cannot parse: a fault
            }
        )
    )
    assert isinstance(task, DatasetTask)
    return task


def test_the_collector_hands_the_runs_registry_to_the_reward_function(
    tmp_path: Path, codec: PromptCodec
) -> None:
    spec = AsyncRLJobSpec.model_validate({"model": {"source": "x"}})
    proxy = ProxyRolloutClient("http://127.0.0.1:9")
    first, second = _dataset_task(tmp_path), _dataset_task(tmp_path)
    faults_1, faults_2 = UserCodeFaults(), UserCodeFaults()
    make_collector(
        spec, source=TaskPrompts(first, codec), proxy=proxy, run_tag="a", faults=faults_1
    )
    make_collector(
        spec, source=TaskPrompts(second, codec), proxy=proxy, run_tag="b", faults=faults_2
    )
    assert first.reward_function.faults is faults_1
    assert second.reward_function.faults is faults_2
    bad_gold = {"a": "not a number at all"}
    first.reward_function.score(["2"], [bad_gold])
    assert [e.count for e in faults_1.entries()] == [1]
    assert faults_2.entries() == []  # the other run saw nothing


def test_the_whitebox_agent_records_into_the_runs_registry(codec: PromptCodec) -> None:
    spec = AsyncRLJobSpec.model_validate({"model": {"source": "x"}, "task": {"name": "household"}})
    faults = UserCodeFaults()
    rollout = group_rollout(
        spec,
        source=TaskPrompts(get_task(spec.task), codec),
        proxy=ProxyRolloutClient("http://127.0.0.1:9"),
        run_tag="t",
        faults=faults,
    )
    assert isinstance(rollout, WhiteboxAgentRollout)
    assert rollout.faults is faults
