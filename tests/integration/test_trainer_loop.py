"""The training loop against a real engine and proxy on loopback: sync rollout through the
proxy, GRPO steps, weight versions published to the engine and carried by the next batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dressage_testkit.engine import start_engine
from dressage_testkit.proxy import start_proxy
from dressage_testkit.trainer import small_model

from dressage.api.job import AsyncRLJobSpec
from dressage.data.groups import TrainBatch
from dressage.engine.client import EngineClient
from dressage.orchestrator.collectors import make_collector
from dressage.orchestrator.loop import StepRecord, train_loop
from dressage.proxy.client import ProxyRolloutClient
from dressage.tasks import get_task
from dressage.tasks.codec import PromptCodec, TaskPrompts
from dressage.trainer.checkpoint import RunDir
from dressage.trainer.session import TrainerSession
from dressage.weights.disk import DiskPublisher
from dressage.weights.engines import ProxyEngines

pytestmark = pytest.mark.integration


class RecordingCollector:
    """Wraps a collector and keeps the batches it produced (the only thing added)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.batches: list[TrainBatch] = []

    async def next_batch(self) -> TrainBatch:
        batch: TrainBatch = await self.inner.next_batch()  # type: ignore[attr-defined]
        self.batches.append(batch)
        return batch

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_sync_loop_publishes_versions_that_the_next_batch_carries(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    model_dir = small_model(tmp_path / "model")
    spec = AsyncRLJobSpec.model_validate(
        {
            "model": {"source": str(model_dir)},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "rollout": {"mode": "sync", "groupSize": 3, "batchSize": 2, "maxNewTokens": 3},
            "training": {"steps": 2, "learningRate": 1e-3},
        }
    )
    session = TrainerSession.open(spec, model_dir=model_dir, run_dir=RunDir(tmp_path / "run"))
    records: list[StepRecord] = []
    with (
        start_engine(model=str(model_dir), weight_version="v0") as engine,
        start_proxy([engine.base_url], "--record-token-versions", "--model", str(model_dir)) as px,
    ):
        proxy = ProxyRolloutClient(px.base_url)
        source = TaskPrompts(get_task(spec.task), PromptCodec.from_pretrained(model_dir))
        collector = RecordingCollector(
            make_collector(spec, source=source, proxy=proxy, run_tag="t")
        )
        publisher = DiskPublisher(ProxyEngines(proxy))
        try:
            await train_loop(
                session, steps=2, collector=collector, publisher=publisher, sink=records.append
            )
            async with EngineClient(engine.base_url) as client:
                assert await client.get_weight_version() == "v2"
        finally:
            await publisher.aclose()
            await proxy.aclose()

    assert [r.version for r in records] == ["v1", "v2"]
    assert [r.step for r in records] == [1, 2]
    # Synchronous rollout: batch k is generated entirely by the weights published after k-1.
    for k, batch in enumerate(collector.batches):
        assert len(batch.groups) == 2
        assert all(len(g.samples) == 3 for g in batch.groups)
        versions = {v for s in batch.samples for v in s.response_versions}
        assert versions == {f"v{k}"}
        assert all(s.reward in (0.0, 1.0) for s in batch.samples)
    assert collector.state_dict() == {"next_prompt": 4}
    # Rollout logprobs from the engine match the trainer's own on the same weights.
    assert records[0].figures.train_rollout_logprob_abs_diff < 1e-3
    assert records[0].figures.version_span_max == 1.0
    assert session.run_dir.latest_step() == 2
    assert session.run_dir.load_state() is not None


@pytest.mark.parametrize("mode", ["sync", "fully_async"])
async def test_a_dead_proxy_stops_the_pipeline_with_the_failures_named(
    tmp_path: Path, mode: str
) -> None:
    """Every rollout attempt meets a refused connection: the retry policy's breaker stops the
    run with `RolloutBroken` instead of the collector waiting for a batch forever."""
    from dressage_testkit.processes import free_port

    from dressage.api.job import AsyncRLJob
    from dressage.orchestrator.pipeline import Endpoints, run_pipeline
    from dressage.rollout.retry import RolloutBroken

    torch.set_num_threads(1)
    model_dir = small_model(tmp_path / "model")
    job = AsyncRLJob.model_validate(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "dead-proxy"},
            "spec": {
                "model": {"source": str(model_dir)},
                "rollout": {"mode": mode, "groupSize": 2, "batchSize": 1, "maxRetries": 1},
                "training": {"steps": 2},
            },
        }
    )
    session = TrainerSession.open(job.spec, model_dir=model_dir, run_dir=RunDir(tmp_path / "r"))
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RolloutBroken, match=r"in a row.*(ConnectError|connection)"):
        await run_pipeline(
            job, session, endpoints=Endpoints(proxy_url=dead, engine_urls=[dead]), steps=2
        )
    assert session.state.step == 0
