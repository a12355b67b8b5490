"""Held-out evaluation over a real embedded engine and a real proxy with partial rollout on:
a publish lands in the middle of an evaluation, and no evaluated sample mixes versions.

The proxy resumes a training generation interrupted by a publish from its partial output (its
tokens then span two versions); an evaluation group's generation it never resumes: it is
generated again from its prompt under the new version. The evaluator counts a group only when
every generated token is the version it evaluates, so the evaluation of the old version stops
(`EvaluationSuperseded`) instead of reporting a figure that mixes two policies, while the
evaluation of the new one, run at the same time, counts only its own samples.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from dressage_testkit.engine import start_engine
from dressage_testkit.proxy import start_proxy

from dressage.agents.single_turn import SingleTurnRollout
from dressage.data.groups import Group, GroupRollout
from dressage.data.versions import distinct_real_versions
from dressage.evaluation.evaluator import (
    EvaluationSettings,
    EvaluationSuperseded,
    Evaluator,
    evaluation_tag,
)
from dressage.evaluation.figures import generated_versions, single_version
from dressage.proxy.client import ProxyRolloutClient, SamplingSettings
from dressage.tasks.base import Scored
from tests.integration.proxy_support import tiny_checkpoint, update_weights, wait_for

pytestmark = pytest.mark.integration

TOKENS = 150
PACE_MS = 4.0
"""Every token takes at least 4 ms: a generation lasts at least 0.6 s, long enough for the
test to see it in flight and publish under it."""
PUBLISH_AT = 2
"""The prompt whose generation the publish lands in."""


class Prompts:
    """Evaluation prompts of token ids; a sample passes when its first token is even."""

    def prompt_ids(self, index: int) -> list[int]:
        return [1, 5 + index, 12, 23]

    async def ascored(self, index: int, output_ids: Sequence[int]) -> Scored:
        return Scored(1.0 if output_ids and output_ids[0] % 2 == 0 else 0.0)


def _versions(group: Group) -> list[str]:
    return distinct_real_versions(v for s in group.samples for v in generated_versions(s))


async def test_a_publish_mid_evaluation_never_mixes_versions_in_a_counted_sample(
    cache_dir: Path,
) -> None:
    with (
        start_engine(cache_dir=cache_dir, weight_version="v0", min_step_interval_ms=PACE_MS) as e,
        start_proxy([e.base_url], "--dressage-partial-rollout", "--record-token-versions") as p,
    ):
        client = ProxyRolloutClient(p.base_url)
        returned: list[tuple[str, Group]] = []
        """Every group the agent gave back, counted or not."""
        counted: list[tuple[str, Group]] = []
        published = asyncio.Event()

        async def publish(control: httpx.AsyncClient) -> None:
            """The async publisher's weight update: abort in-flight generations, load the new
            version, continue on it."""

            async def in_flight() -> bool:
                return int((await control.get("/health")).json()["inflight"]) >= 1

            await wait_for(in_flight, timeout_s=60, what="an evaluation generation in flight")
            assert (await control.post("/pause_generation", json={"mode": "abort"})).is_success
            await update_weights(e.base_url, tiny_checkpoint(cache_dir), "v1")
            resumed = await control.post("/continue_generation", json={"weight_version": "v1"})
            assert resumed.is_success
            published.set()

        def agent_for(version: str) -> GroupRollout:
            agent = SingleTurnRollout(
                source=Prompts(),
                client=client,
                group_size=2,
                sampling=SamplingSettings(max_new_tokens=TOKENS, temperature=1.0, ignore_eos=True),
                run_tag=evaluation_tag("job", version),
                refresh_share=0.0,
            )

            async def rollout(index: int, attempt: int) -> Group:
                if version == "v0" and index == PUBLISH_AT and not published.is_set():
                    async with httpx.AsyncClient(base_url=p.base_url, timeout=60) as control:
                        group, _ = await asyncio.gather(agent(index, attempt), publish(control))
                else:
                    group = await agent(index, attempt)
                returned.append((version, group))
                return group

            return rollout

        evaluator = Evaluator(
            agent_for,
            EvaluationSettings(prompts=6, ks=[1, 2], max_concurrency=1),
            counted=lambda version, group: counted.append((version, group)),
        )
        try:
            with pytest.raises(EvaluationSuperseded) as superseded:
                await evaluator.evaluate("v0", 0)
            # Two evaluations at once, of the version the engines left and of the new one.
            old, new = await asyncio.gather(
                evaluator.evaluate("v0", 0), evaluator.evaluate("v1", 1), return_exceptions=True
            )
        finally:
            await client.aclose()

    assert superseded.value.serving == "v1"
    assert isinstance(old, EvaluationSuperseded)
    assert not isinstance(new, BaseException)
    assert new.version == "v1"
    assert new.prompts == 6
    assert new.samples_per_prompt == 2
    # The proxy never resumed an evaluation generation across the publish: every group it
    # gave back is one version's, the interrupted one generated again under v1.
    assert all(len(_versions(group)) == 1 for _, group in returned)
    assert any(_versions(group) == ["v1"] for version, group in returned if version == "v0")
    # Counted groups are the evaluated version's, every generated token of them, and an
    # evaluation's groups are its own (tagged by version).
    assert {version for version, _ in counted} == {"v0", "v1"}
    for version, group in counted:
        assert single_version(group.samples, version)
        assert group.group_id.startswith(evaluation_tag("job", version) + "-")
    assert sum(1 for version, _ in counted if version == "v1") == 6
