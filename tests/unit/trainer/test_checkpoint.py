"""Checkpoints that scale: optimizer state on its own cadence, resume from a checkpoint whose
optimizer state is older, weights written only with checkpoints under distributed sync, and a
published version that never waits for the checkpoint write."""

from __future__ import annotations

import asyncio
import copy
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from dressage_testkit.trainer import job_spec, small_model, synthetic_batch
from pydantic import ValidationError

from dressage.api.job import InferenceSpec, TrainingSpec
from dressage.data.groups import TrainBatch
from dressage.orchestrator.loop import StepRecord, train_loop
from dressage.trainer.checkpoint import RunDir
from dressage.trainer.session import TrainerSession

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_model(tmp_path_factory.mktemp("model"))


def _train(session: TrainerSession, until: int) -> None:
    while session.state.step < until:
        session.trainer.train_step(synthetic_batch(session.state.step + 1))
        session.commit_step({"next_prompt": session.state.step})
    session.wait_for_checkpoint()


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _moments(session: TrainerSession) -> dict[int, dict[str, Any]]:
    return copy.deepcopy(session.trainer.optimizer.state_dict()["state"])


def test_the_optimizer_cadence_must_be_a_multiple_of_the_checkpoint_cadence() -> None:
    with pytest.raises(ValidationError, match=r"training\.optimizerCheckpointEvery"):
        TrainingSpec(checkpoint_every=2, optimizer_checkpoint_every=3)
    assert TrainingSpec(checkpoint_every=2).optimizer_every == 2
    assert TrainingSpec(checkpoint_every=2, optimizer_checkpoint_every=6).optimizer_every == 6


def test_optimizer_state_is_written_every_optimizer_checkpoint_and_kept_by_pruning(
    model_dir: Path, tmp_path: Path
) -> None:
    run = RunDir(tmp_path / "run")
    spec = job_spec(learning_rate=1e-2, optimizer_checkpoint_every=4)
    session = TrainerSession.open(spec, model_dir=model_dir, run_dir=run)
    _train(session, 7)
    # The two newest checkpoints, plus the newest one that has optimizer state.
    assert run.steps() == [4, 6, 7]
    assert [run.has_optimizer(s) for s in run.steps()] == [True, False, False]
    assert run.optimizer_step(7) == 4
    # Weights alone: about a third of weights plus AdamW's two moments.
    assert _size(run.rank_dir(7, 0)) < 0.5 * _size(run.rank_dir(4, 0))


def test_a_resume_takes_the_newest_weights_and_the_older_optimizer_state(
    model_dir: Path, tmp_path: Path
) -> None:
    spec = job_spec(learning_rate=1e-2, optimizer_checkpoint_every=2)
    first = TrainerSession.open(spec, model_dir=model_dir, run_dir=RunDir(tmp_path / "run"))
    _train(first, 2)
    moments_at_2 = _moments(first)
    _train(first, 3)
    weights_at_3 = {k: v.clone() for k, v in first.trainer.module.state_dict().items()}
    assert _moments(first)[0]["step"] != moments_at_2[0]["step"]

    with pytest.warns(UserWarning, match="optimizer state of step 2.*1 steps old"):
        resumed = TrainerSession.open(spec, model_dir=model_dir, run_dir=RunDir(tmp_path / "run"))
    assert (resumed.state.step, resumed.optimizer_step) == (3, 2)
    for name, tensor in resumed.trainer.module.state_dict().items():
        assert torch.equal(tensor, weights_at_3[name]), name
    loaded = _moments(resumed)
    assert loaded.keys() == moments_at_2.keys()
    for index, state in moments_at_2.items():
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(loaded[index][key]), torch.as_tensor(value)), key
    _train(resumed, 4)  # and it trains on from there


def test_a_resume_without_any_optimizer_state_starts_fresh_moments(
    model_dir: Path, tmp_path: Path
) -> None:
    spec = job_spec(learning_rate=1e-2, optimizer_checkpoint_every=4)
    first = TrainerSession.open(spec, model_dir=model_dir, run_dir=RunDir(tmp_path / "run"))
    _train(first, 2)
    weights = {k: v.clone() for k, v in first.trainer.module.state_dict().items()}
    with pytest.warns(UserWarning, match="fresh optimizer moments"):
        resumed = TrainerSession.open(spec, model_dir=model_dir, run_dir=RunDir(tmp_path / "run"))
    assert resumed.state.step == 2
    assert resumed.trainer.optimizer.state_dict()["state"] == {}
    for name, tensor in resumed.trainer.module.state_dict().items():
        assert torch.equal(tensor, weights[name]), name


def test_with_distributed_sync_weights_are_written_only_with_checkpoints(
    model_dir: Path, tmp_path: Path
) -> None:
    run = RunDir(tmp_path / "run")
    spec = job_spec(learning_rate=1e-2, checkpoint_every=2).model_copy(
        update={"inference": InferenceSpec(weight_sync="distributed")}
    )
    session = TrainerSession.open(spec, model_dir=model_dir, run_dir=run)
    _train(session, 3)
    assert sorted(p.name for p in run.weights_root.iterdir()) == ["v2"]
    assert (run.weights_dir("v2") / "model.safetensors").is_file()


class _Batches:
    async def next_batch(self) -> TrainBatch:
        return synthetic_batch(1)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def on_weights_published(self, version: str) -> None:
        pass


class _Publisher:
    def __init__(self) -> None:
        self.published = threading.Event()

    async def publish(self, model_path: Path, version: str) -> None:
        self.published.set()


def test_a_version_is_published_before_its_checkpoint_write_is_waited_for(
    model_dir: Path, tmp_path: Path
) -> None:
    """A CPU session writes checkpoints in line; the loop still publishes first: the write
    here finishes only once the version is published, and the step's record comes after the
    checkpoint is complete."""
    run = RunDir(tmp_path / "run")
    session = TrainerSession.open(job_spec(), model_dir=model_dir, run_dir=run)
    assert not session.checkpoint_in_background
    publisher = _Publisher()
    save = run.save_shards

    def gated(step: int, rank: int, shards: dict[str, Any]) -> Future[None]:
        def write() -> None:
            if not publisher.published.wait(timeout=20):
                raise AssertionError("the checkpoint was waited for before the publish")
            save(step, rank, shards).result()

        return ThreadPoolExecutor(max_workers=1).submit(write)

    run.save_shards = gated  # type: ignore[method-assign]
    complete: list[int | None] = []

    def sink(record: StepRecord) -> None:
        complete.append(run.latest_step())

    asyncio.run(
        train_loop(
            session,
            steps=1,
            collector=_Batches(),  # type: ignore[arg-type]
            publisher=publisher,  # type: ignore[arg-type]
            sink=sink,
        )
    )
    assert complete == [1]


def test_pruning_keeps_the_pinned_best_evaluated_versions_weights(
    model_dir: Path, tmp_path: Path
) -> None:
    run = RunDir(tmp_path / "run")
    session = TrainerSession.open(job_spec(), model_dir=model_dir, run_dir=run)
    _train(session, 2)
    session.pinned_versions = {"v2"}  # the best-evaluated version (`spec.evaluation`)
    _train(session, 9)
    kept = sorted(p.name for p in (tmp_path / "run" / "weights").iterdir())
    assert "v2" in kept
    assert "v3" not in kept  # an unpinned old version is pruned as before
    assert "v9" in kept
