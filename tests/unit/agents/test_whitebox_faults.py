"""An environment that raises fails its trajectory as `environment_raised`, naming the class,
the method, the exception type and the environment's own line, once in the log."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from dressage.agents.whitebox import WhiteboxAgentRollout
from dressage.model.tokenizer import build_tokenizer_files
from dressage.proxy.client import ProxyRolloutClient, SamplingSettings
from dressage.tasks.base import Step
from dressage.tasks.codec import PromptCodec
from dressage.tasks.faults import ENVIRONMENT_RAISED, UserCodeFailed

pytest.importorskip("transformers")


class Episode:
    prompt = "say 1"

    def step(self, action: str) -> Step:
        raise RuntimeError("oops in step")

    def expert_action(self) -> str:
        return "1"


class StepRaises:
    name = "step-raises"
    max_turns = 2

    def episode(self, index: int) -> Episode:
        return Episode()


class EpisodeRaises(StepRaises):
    def episode(self, index: int) -> Episode:
        return {}["level"]  # type: ignore[no-any-return]


class Proxy:
    """Answers every turn with "1"; keeps what a group's failure path asks of it."""

    def __init__(self, codec: PromptCodec) -> None:
        self.codec = codec
        self.discarded: list[str] = []

    async def generate(self, ids: Sequence[int], sampling: Any, **kwargs: Any) -> list[int]:
        return self.codec.encode_answer("1")

    async def finalize(self, session_id: str, reward: float, *, instance_id: str) -> None:
        raise AssertionError("a failed trajectory is not finalized")

    async def discard(self, session_id: str, *, instance_id: str) -> None:
        self.discarded.append(session_id)

    async def segments(self, group_id: str) -> list[Any]:
        return []


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> PromptCodec:
    out = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer_files(out)
    return PromptCodec.from_pretrained(out)


def _agent(environment: Any, proxy: Proxy, codec: PromptCodec) -> WhiteboxAgentRollout:
    return WhiteboxAgentRollout(
        environment=environment,
        codec=codec,
        client=cast(ProxyRolloutClient, proxy),
        group_size=3,
        sampling=SamplingSettings(max_new_tokens=2),
    )


async def test_a_raising_step_fails_the_group_naming_the_class_and_the_exception(
    codec: PromptCodec, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = Proxy(codec)
    agent = _agent(StepRaises(), proxy, codec)
    with caplog.at_level(logging.WARNING), pytest.raises(UserCodeFailed) as failed:
        await agent(0, 0)
    fault = failed.value.fault
    assert failed.value.reason == ENVIRONMENT_RAISED
    assert failed.value.stop is None  # retried like any failed group
    assert str(fault).startswith(
        f"spec.task.environment {__name__}:StepRaises: step() raised RuntimeError: oops in step "
        "(at "
    )
    assert (fault.error_type, fault.call) == ("RuntimeError", "step()")
    assert fault.frame is not None
    assert Path(fault.frame.file) == Path(__file__)
    assert fault.frame.line == inspect.getsourcelines(Episode.step)[1] + 1
    assert fault.frame.code == 'raise RuntimeError("oops in step")'
    assert len(proxy.discarded) == 3
    # Three trajectories raised the same error: logged once, counted three times.
    assert [r.getMessage().splitlines()[0] for r in caplog.records] == [
        f"user code failed: {fault}"
    ]
    assert [e.count for e in agent.faults.entries()] == [3]  # the registry it was given


async def test_a_raising_episode_names_episode(codec: PromptCodec) -> None:
    with pytest.raises(UserCodeFailed) as failed:
        await _agent(EpisodeRaises(), Proxy(codec), codec)(0, 0)
    assert failed.value.fault.call == "episode()"
    assert failed.value.fault.error_type == "KeyError"
    assert f"{__name__}:EpisodeRaises: episode() raised KeyError: 'level'" in str(failed.value)
