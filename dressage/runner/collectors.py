"""Pick the collector for a job's `spec.rollout.mode`.

`sync` is the synchronous collector. The async modes plug in here with the same `Collector`
protocol; until they exist, asking for them is an error that says so, rather than a silent
fallback that would run a different experiment than the manifest describes.
"""

from __future__ import annotations

from dressage.api.job import AsyncRLJobSpec, RolloutMode
from dressage.rollout.sync_rollout import (
    PromptSource,
    ProxyRolloutClient,
    SamplingSettings,
    SyncCollector,
)
from dressage.runner.collector import Collector


class CollectorUnavailable(ValueError):
    """The job asks for a rollout mode this build cannot run."""


def check_mode(spec: AsyncRLJobSpec) -> None:
    """Raise `CollectorUnavailable` for a mode without a collector (before starting anything)."""
    if spec.rollout.mode is not RolloutMode.SYNC:
        raise CollectorUnavailable(
            f"spec.rollout.mode: {spec.rollout.mode.value!r} is not available yet in this "
            "build; set rollout.mode to 'sync'"
        )


def make_collector(
    spec: AsyncRLJobSpec, *, source: PromptSource, proxy: ProxyRolloutClient, run_tag: str
) -> Collector:
    """The collector for `spec.rollout.mode`, talking to the proxy."""
    check_mode(spec)
    rollout = spec.rollout
    return SyncCollector(
        source=source,
        client=proxy,
        group_size=rollout.group_size,
        batch_size=rollout.batch_size,
        sampling=SamplingSettings(
            max_new_tokens=rollout.max_new_tokens,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
        ),
        max_retries=rollout.max_retries,
        concurrency=rollout.concurrency,
        seed=spec.training.seed,
        run_tag=run_tag,
    )
