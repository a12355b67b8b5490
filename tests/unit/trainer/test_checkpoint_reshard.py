"""Resharding a checkpoint to another world size: the dim-0 chunk arithmetic FSDP2 shards by,
and a run directory's shard files cut into a new gang's shards, in one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.trainer.checkpoint import (
    RunDir,
    ShardRows,
    TrainState,
    chunk_rows,
    reshard_plan,
)

shapes = st.tuples(st.integers(0, 23), st.lists(st.integers(1, 3), max_size=2))
worlds = st.integers(1, 9)


def _chunks(full: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """`full` cut as FSDP2 cuts a parameter: `torch.chunk`, padded with empty chunks."""
    chunks = list(torch.chunk(full, parts, dim=0))
    return chunks + [full[:0]] * (parts - len(chunks))


def _reshard(old: list[torch.Tensor], shape: tuple[int, ...], parts: int) -> list[torch.Tensor]:
    out = []
    for rank in range(parts):
        start, stop = chunk_rows(shape[0], parts, rank)
        local = torch.full((stop - start, *shape[1:]), -1.0)
        plan = reshard_plan([tuple(t.shape) for t in old], ShardRows(shape, start), stop - start)
        assert plan is not None
        for source, lo, hi, offset in plan:
            local[offset : offset + hi - lo] = old[source][lo:hi]
        out.append(local)
    return out


@settings(max_examples=200, deadline=None)
@given(shapes, worlds)
def test_chunk_rows_are_the_chunks_fsdp2_shards_by(shape: Any, parts: int) -> None:
    rows, tail = shape
    full = torch.arange(float(rows * max(1, _prod(tail)))).reshape(rows, *tail)
    for rank, chunk in enumerate(_chunks(full, parts)):
        start, stop = chunk_rows(rows, parts, rank)
        assert torch.equal(full[start:stop], chunk)


@settings(max_examples=200, deadline=None)
@given(shapes, worlds, worlds)
def test_chunk_concat_rechunk_is_the_identity(shape: Any, old_world: int, new_world: int) -> None:
    rows, tail = shape
    full = torch.arange(float(rows * _prod(tail))).reshape(rows, *tail)
    new = _reshard(_chunks(full, old_world), (rows, *tail), new_world)
    for got, want in zip(new, _chunks(full, new_world), strict=True):
        assert torch.equal(got, want)
    assert torch.equal(torch.cat(new), full)


def test_a_plan_refuses_shards_that_neither_make_up_nor_repeat_the_tensor() -> None:
    assert reshard_plan([(3, 2), (3, 2)], ShardRows((7, 2)), 4) is None
    assert reshard_plan([(4, 2), (3, 3)], ShardRows((7, 2)), 4) is None
    assert reshard_plan([(), ()], ShardRows((2,)), 1) is None
    # A tensor every old rank holds whole is read from old rank 0.
    assert reshard_plan([(5,), (5,)], ShardRows((5,), 3), 2) == [(0, 3, 5, 0)]
    assert reshard_plan([(), (), ()], ShardRows(()), 0) == [(0, 0, 0, 0)]


def _prod(dims: list[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


FULL = torch.arange(70.0).reshape(7, 10)
MOMENT = -torch.arange(70.0).reshape(7, 10)


def _shards(world: int, rank: int) -> dict[str, Any]:
    start, stop = chunk_rows(7, world, rank)
    return {
        "model": {"w": FULL[start:stop].clone(), "b": torch.ones(3)},
        "optimizer": {
            "state": {"w": {"step": torch.tensor(4.0), "exp_avg": MOMENT[start:stop].clone()}},
            "param_groups": [{"lr": 0.25, "betas": (0.9, 0.99), "params": ["w"]}],
        },
    }


def _checkpoint(root: Path, world: int, step: int = 2, *, optimizer: bool = True) -> RunDir:
    run = RunDir(root)
    run.write_state(TrainState(step=step, version_index=step), world, optimizer=optimizer)
    for rank in range(world):
        run.save_shards(step, rank, _shards(world, rank)).result()
    assert run.is_complete(step)
    return run


def _layout(world: int, rank: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Empty buffers and the layout of rank `rank` of a gang of `world` (as the trainer
    builds them), with the non-tensor entries a fresh optimizer would have."""
    start, stop = chunk_rows(7, world, rank)
    buffers = {
        "model": {"w": torch.empty(stop - start, 10), "b": torch.empty(3)},
        "optimizer": {
            "state": {"w": {"step": torch.tensor(0.0), "exp_avg": torch.empty(stop - start, 10)}},
            "param_groups": [{"lr": 1.0, "betas": (0.0, 0.0), "params": ["w"]}],
        },
    }
    layout = {
        "model": {"w": ShardRows((7, 10), start), "b": ShardRows((3,))},
        "optimizer": {
            "state": {"w": {"step": ShardRows(()), "exp_avg": ShardRows((7, 10), start)}},
            "param_groups": [{"lr": 1.0, "betas": (0.0, 0.0), "params": ["w"]}],
        },
    }
    return buffers, layout


@pytest.mark.parametrize(("old", "new"), [(2, 1), (2, 3), (1, 2), (3, 8)])
def test_a_checkpoint_is_cut_into_the_shards_of_a_gang_of_another_size(
    tmp_path: Path, old: int, new: int
) -> None:
    run = _checkpoint(tmp_path / "run", old)
    got = []
    for rank in range(new):
        buffers, layout = _layout(new, rank)
        run.load_local(2, rank, new, buffers, layout)
        assert buffers["optimizer"]["param_groups"] == [
            {"lr": 0.25, "betas": (0.9, 0.99), "params": ["w"]}
        ]
        assert buffers["optimizer"]["state"]["w"]["step"].item() == 4.0
        assert torch.equal(buffers["model"]["b"], torch.ones(3))
        got.append(buffers)
    assert torch.equal(torch.cat([b["model"]["w"] for b in got]), FULL)
    assert torch.equal(torch.cat([b["optimizer"]["state"]["w"]["exp_avg"] for b in got]), MOMENT)


def test_a_checkpoint_of_another_model_is_refused_naming_the_entry(tmp_path: Path) -> None:
    run = _checkpoint(tmp_path / "run", 2)
    buffers, layout = _layout(3, 0)
    layout["model"]["w"] = ShardRows((8, 10), 0)
    buffers["model"]["w"] = torch.empty(3, 10)
    with pytest.raises(ValueError, match=r"'model\.w'.*\[\(4, 10\), \(3, 10\)\]"):
        run.load_local(2, 0, 3, buffers, layout)
    buffers, layout = _layout(3, 0)
    buffers["model"]["extra"] = torch.empty(1)
    layout["model"]["extra"] = ShardRows((3,))
    with pytest.raises(ValueError, match=r"no 'model\.extra'"):
        run.load_local(2, 0, 3, buffers, layout)


def test_the_older_optimizer_state_may_come_from_a_checkpoint_of_another_size(
    tmp_path: Path,
) -> None:
    run = _checkpoint(tmp_path / "run", 2, step=2)
    _checkpoint(tmp_path / "run", 3, step=3, optimizer=False)
    assert run.optimizer_step(3) == 2
    assert (run.world_size(2), run.world_size(3)) == (2, 3)
