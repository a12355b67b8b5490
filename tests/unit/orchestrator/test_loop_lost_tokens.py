"""Each step's token ledger carries what rank 0 read beside the collector (the proxies' lost
tokens, `train_loop(lost_tokens=)`): in the record the sink gets and in the one the checkpoint
keeps, and apart in `StepRecord.lost_tokens` so the collector's own counts stay known."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from dressage_testkit.trainer import job_spec, small_model, synthetic_batch

from dressage.data.groups import TrainBatch
from dressage.orchestrator.loop import StepRecord, train_loop
from dressage.trainer.checkpoint import RunDir
from dressage.trainer.session import TrainerSession

torch.set_num_threads(1)


class _Batches:
    async def next_batch(self) -> TrainBatch:
        batch = synthetic_batch(1)
        figures = batch.figures.copy()
        figures.ledger_tokens.update({"trained": 20, "refused.engine_failed": 3})
        return replace(batch, figures=figures)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def on_weights_published(self, version: str) -> None:
        pass


class _Publisher:
    collective = False

    async def publish(self, model_path: Path, version: str) -> None:
        pass


def test_the_proxys_lost_tokens_join_each_steps_ledger(tmp_path: Path) -> None:
    session = TrainerSession.open(
        job_spec(), model_dir=small_model(tmp_path / "model"), run_dir=RunDir(tmp_path / "run")
    )
    reads = iter(
        [
            Counter({"refused.engine_failed": 4, "evaluation": 1}),
            Counter({"aborted.restarted": 2}),
        ]
    )

    async def lost_tokens() -> Counter[str]:
        return next(reads)

    records: list[StepRecord] = []
    asyncio.run(
        train_loop(
            session,
            steps=2,
            collector=_Batches(),  # type: ignore[arg-type]
            publisher=_Publisher(),  # type: ignore[arg-type]
            sink=records.append,
            lost_tokens=lost_tokens,
        )
    )
    first, second = records
    assert first.figures.ledger_tokens == {
        "trained": 20,
        "refused.engine_failed": 7,
        "evaluation": 1,
    }
    assert first.lost_tokens == {"refused.engine_failed": 4, "evaluation": 1}
    # What the collector counted, for what it counted beyond the records at the close.
    assert first.collected().ledger_tokens == {"trained": 20, "refused.engine_failed": 3}
    expected = {"trained": 20, "refused.engine_failed": 3, "aborted.restarted": 2}
    assert second.figures.ledger_tokens == expected
    assert second.lost_tokens == {"aborted.restarted": 2}
    # The checkpoint keeps the record with them: a resumed run's history is the same.
    assert session.state.record is not None
    assert session.state.record["ledger_tokens"] == expected
