"""The whitebox multi-turn agent over real HTTP: engine and proxy in their own processes.

The environment is scripted (it accepts any reply and ends after three turns), so the untrained
tiny model can play full episodes: what is checked is the token path, not the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from dressage_testkit.engine import start_engine
from dressage_testkit.proxy import start_proxy

from dressage.agents.whitebox import WhiteboxAgentRollout
from dressage.proxy.client import ProxyRolloutClient, RolloutError, SamplingSettings
from dressage.tasks.base import Step
from dressage.tasks.codec import Conversation, PromptCodec
from tests.integration.proxy_support import tiny_checkpoint, update_weights

pytestmark = pytest.mark.integration
TURNS = 3


@dataclass
class ScriptedEpisode:
    """Answers every reply with `seen <turn>`; reward 0.25 per turn, done after TURNS."""

    prompt: str
    turns: int = 0

    def step(self, action: str) -> Step:
        self.turns += 1
        return Step(f"seen {self.turns}", 0.25, self.turns == TURNS)

    def expert_action(self) -> str:
        return "ok"


class ScriptedEnvironment:
    name = "scripted"
    max_turns = TURNS + 2

    def __init__(self) -> None:
        self.played: list[ScriptedEpisode] = []

    def episode(self, index: int) -> ScriptedEpisode:
        episode = ScriptedEpisode(prompt=f"task {index}")
        self.played.append(episode)
        return episode


async def test_each_trajectory_is_one_sample_with_loss_on_generated_tokens_only(
    tmp_path: Path,
) -> None:
    with (
        start_engine(cache_dir=tmp_path, weight_version="v7") as engine,
        start_proxy([engine.base_url], "--record-token-versions") as proxy,
    ):
        codec = PromptCodec.from_pretrained(tiny_checkpoint(tmp_path))
        client = ProxyRolloutClient(proxy.base_url)
        environment = ScriptedEnvironment()
        rollout = WhiteboxAgentRollout(
            environment=environment,
            codec=codec,
            client=client,
            group_size=3,
            sampling=SamplingSettings(max_new_tokens=5),
        )
        try:
            group = await rollout(4, 0)
        finally:
            await client.aclose()

    assert len(group.samples) == 3
    assert all(episode.turns == TURNS for episode in environment.played)
    assert {s.parent_traj_id for s in group.samples} == {f"run-p4-a0-t{i}" for i in range(3)}
    for sample in group.samples:
        assert sample.segment_index == 0  # every turn extended the same segment
        assert sample.reward == pytest.approx(0.75)
        response = sample.tokens[len(sample.tokens) - sample.response_length :]
        prompt = sample.tokens[: len(sample.tokens) - sample.response_length]
        assert list(prompt) == Conversation(codec, "task 4").ids
        # Three runs of trained tokens (one per turn), separated by observation tokens.
        runs = _runs(sample.loss_mask)
        assert len(runs) == TURNS
        observations = codec.tokenizer.decode(
            [t for t, m in zip(response, sample.loss_mask, strict=True) if m == 0]
        )
        assert "seen 1" in observations
        assert "seen 2" in observations
        # Generated tokens carry the engine's version and a logprob; the rest carry neither.
        versions = sample.full_versions[len(prompt) :]
        for mask, version, logprob in zip(
            sample.loss_mask, versions, sample.rollout_log_probs, strict=True
        ):
            assert (version == "v7") == (mask == 1)
            assert logprob <= 0.0 if mask else logprob == 0.0


async def test_a_version_change_between_turns_without_partial_rollout_fails_the_group(
    tmp_path: Path,
) -> None:
    """The proxy refuses the turn (409); the agent raises so the collector retries the group."""
    with (
        start_engine(cache_dir=tmp_path, weight_version="v1") as engine,
        start_proxy([engine.base_url], "--record-token-versions") as proxy,
    ):
        codec = PromptCodec.from_pretrained(tiny_checkpoint(tmp_path))
        client = ProxyRolloutClient(proxy.base_url)
        sampling = SamplingSettings(max_new_tokens=3)
        try:
            conversation = Conversation(codec, "task 0")
            first = await client.generate(
                conversation.ids, sampling, session_id="s", instance_id="g"
            )
            conversation.add_turn(first, "seen 1")
            await update_weights(engine.base_url, tiny_checkpoint(tmp_path), "v2")
            with pytest.raises(RolloutError) as refused:
                await client.generate(conversation.ids, sampling, session_id="s", instance_id="g")
        finally:
            await client.aclose()
    assert refused.value.code == "version_changed_without_partial_rollout"
    assert refused.value.status == 409


def _runs(mask: tuple[int, ...]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    start = None
    for i, m in enumerate((*mask, 0)):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out
