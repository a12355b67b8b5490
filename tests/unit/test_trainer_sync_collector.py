"""The synchronous collector's bookkeeping: retries, drops by reason, data position.

The proxy is replaced by an in-memory stand-in with the same methods (the HTTP path itself is
covered by the integration tests against a real proxy).
"""

from __future__ import annotations

from collections.abc import Sequence

from dressage.rollout.artifacts.samples import Sample
from dressage.rollout.sync_rollout import (
    ProxyRolloutClient,
    RolloutError,
    SamplingSettings,
    SyncCollector,
)


class Prompts:
    def prompt_ids(self, index: int) -> list[int]:
        return [10 + index, 11]

    def reward(self, index: int, output_ids: Sequence[int]) -> float:
        return float(output_ids[0] % 2)


class FakeProxy(ProxyRolloutClient):
    """Sessions in memory; prompts in `failing` fail with `code` on every attempt."""

    def __init__(self, failing: set[int], code: str = "engine_unavailable") -> None:
        super().__init__("http://unused")
        self.failing = failing
        self.code = code
        self.finished: dict[str, list[Sample]] = {}
        self.pending: dict[str, tuple[str, list[int], list[int]]] = {}
        self.attempts: list[str] = []

    async def generate(  # type: ignore[override]
        self, prompt_ids: Sequence[int], sampling: SamplingSettings, *, session_id: str,
        instance_id: str, seed: int | None = None,
    ) -> list[int]:  # fmt: skip
        self.attempts.append(instance_id)
        if prompt_ids[0] - 10 in self.failing:
            raise RolloutError("POST /generate: HTTP 503", status=503, code=self.code)
        output = [seed or 0, 2]
        self.pending[session_id] = (instance_id, list(prompt_ids), output)
        return output

    async def finalize(self, session_id: str, reward: float | None) -> None:
        instance, prompt, output = self.pending.pop(session_id)
        sample = Sample.build(
            prompt_tokens=prompt,
            response_tokens=output,
            response_versions=["v0"] * len(output),
            rollout_log_probs=[-1.0] * len(output),
            reward=reward,
            group_id=instance,
            parent_traj_id=session_id,
        )
        self.finished.setdefault(instance, []).append(sample)

    async def segments(self, instance_id: str) -> list[Sample]:
        return self.finished.pop(instance_id, [])

    async def discard(self, session_id: str) -> None:
        self.pending.pop(session_id, None)


def _collector(proxy: FakeProxy, batch_size: int = 2) -> SyncCollector:
    return SyncCollector(
        source=Prompts(),
        client=proxy,
        group_size=3,
        batch_size=batch_size,
        sampling=SamplingSettings(max_new_tokens=2),
        max_retries=2,
        retry_backoff_s=0.0,
        run_tag="t",
    )


async def test_full_groups_with_rewards_and_the_data_position() -> None:
    proxy = FakeProxy(failing=set())
    collector = _collector(proxy)
    batch = await collector.next_batch()
    assert [g.group_id for g in batch.groups] == ["t-p0-a0", "t-p1-a0"]
    assert all(len(g.samples) == 3 for g in batch.groups)
    assert all(s.reward is not None for s in batch.samples)
    assert batch.dropped_groups == {}
    assert collector.state_dict() == {"next_prompt": 2}


async def test_a_failing_group_is_retried_then_dropped_and_replaced() -> None:
    proxy = FakeProxy(failing={1})
    collector = _collector(proxy)
    batch = await collector.next_batch()
    assert [g.group_id for g in batch.groups] == ["t-p0-a0", "t-p2-a0"]
    assert batch.dropped_groups == {"retries_exhausted": 1}
    assert batch.failed_groups == 3  # 1 attempt + 2 retries
    assert batch.retries == 2
    assert batch.failure_reasons == {"engine_unavailable": 3}
    assert batch.staleness_failures == 0
    assert {"t-p1-a0", "t-p1-a1", "t-p1-a2"} <= set(proxy.attempts)
    assert collector.state_dict() == {"next_prompt": 3}


async def test_staleness_refusals_are_counted() -> None:
    proxy = FakeProxy(failing={0}, code="partial_rollout_staleness_exceeded")
    batch = await _collector(proxy, batch_size=1).next_batch()
    assert batch.staleness_failures == 3


async def test_resume_from_state_continues_the_prompt_stream() -> None:
    collector = _collector(FakeProxy(failing=set()))
    collector.load_state_dict({"next_prompt": 7})
    batch = await collector.next_batch()
    assert [g.group_id for g in batch.groups] == ["t-p7-a0", "t-p8-a0"]
