"""A trainer rank's own shards of the weights and optimizer state, as plain CPU tensors.

The trainer's checkpoints are written per rank (`dressage.trainer.session`): each rank saves
the local part of every FSDP2 DTensor, and loads it back, possibly cut from the shards of a
gang of another size (`dressage.trainer.checkpoint.reshard_plan`). This module turns a
trainer's state dicts into those local tensors and back; it knows FSDP2's dim-0 placement and
nothing about files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dressage.trainer.checkpoint import ShardRows, chunk_rows

if TYPE_CHECKING:
    from dressage.trainer.grpo import GRPOTrainer


def _tree_map(tree: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: _tree_map(v, fn) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_tree_map(v, fn) for v in tree]
    if isinstance(tree, tuple):
        return tuple(_tree_map(v, fn) for v in tree)
    return tree


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)
    local: torch.Tensor = to_local() if callable(to_local) else tensor
    return local


def _restore(target: Any, loaded: Any) -> Any:
    """`target` with every tensor's local data overwritten from `loaded` (same structure) and
    every other value taken from `loaded`."""
    if isinstance(target, torch.Tensor):
        _local(target).detach().copy_(loaded)
        return target
    if isinstance(target, dict):
        return {k: _restore(v, loaded[k]) for k, v in target.items()}
    if isinstance(target, list | tuple):
        return type(target)(_restore(t, x) for t, x in zip(target, loaded, strict=True))
    return loaded


def _options(trainer: GRPOTrainer) -> Any:
    """What a checkpoint holds: the parameters that train. A frozen base (a LoRA adapter's,
    `dressage.trainer.lora`) is left out, since every start loads it from the initial model;
    a model that trains every parameter is checkpointed whole, and strictly restored."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    frozen = any(not p.requires_grad for p in trainer.model.parameters())
    return StateDictOptions(ignore_frozen_params=frozen, strict=not frozen)


def local_shards(trainer: GRPOTrainer, *, optimizer: bool = True) -> dict[str, Any]:
    """This rank's shards of the float32 master weights that train (`_options`) and (with
    `optimizer`) of the optimizer state, copied to CPU as plain tensors (a snapshot: training
    may continue while it is written)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    options = _options(trainer)
    if optimizer:
        model, optim = get_state_dict(trainer.model, trainer.optimizer, options=options)
        snapshot: dict[str, Any] = {"model": model, "optimizer": optim}
    else:
        snapshot = {"model": get_model_state_dict(trainer.model, options=options)}
    return dict(_tree_map(snapshot, lambda t: _local(t).detach().to("cpu", copy=True)))


def shard_rows(tensor: torch.Tensor) -> ShardRows | None:
    """Which rows of its full tensor `tensor`'s local part is: FSDP2's dim-0 chunk for a
    DTensor sharded on dim 0, all of it for a plain or replicated tensor (None for another
    placement, which a checkpoint cannot be resharded into)."""
    placements = getattr(tensor, "placements", None)
    shape = tuple(tensor.shape)
    if placements is None:
        return ShardRows(shape)
    from torch.distributed.tensor import Replicate, Shard

    if all(isinstance(p, Replicate) for p in placements):
        return ShardRows(shape)
    if len(placements) != 1 or placements[0] != Shard(0) or not shape:
        return None
    mesh: Any = tensor.device_mesh  # type: ignore[attr-defined]
    start, stop = chunk_rows(shape[0], mesh.size(), mesh.get_local_rank())
    if _local(tensor).shape[0] != stop - start:
        return None
    return ShardRows(shape, start)


Loader = Callable[[dict[str, Any], dict[str, Any]], None]
"""Fills `buffers` (plain CPU tensors shaped like a rank's `local_shards`) in place; its
second argument has the same structure with each tensor's `shard_rows`."""


def load_local_shards(
    trainer: GRPOTrainer,
    load: Loader,
    load_optimizer: Loader | None = None,
) -> None:
    """Fill the trainer's weights from this rank's shards, and its optimizer state from the
    shards `load_optimizer` reads (None: the optimizer keeps its fresh state). Each loader
    fills `buffers` (shaped like `local_shards`, `{"model": ...}` or `{"optimizer": ...}`) in
    place, given which rows of each full tensor they are (`shard_rows`), so that it can cut
    them from a checkpoint of another world size; the two may read different checkpoints."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    def read(part: str, reader: Loader, target: Any) -> Any:
        buffers = {part: _tree_map(target, lambda t: torch.empty_like(_local(t), device="cpu"))}
        reader(buffers, {part: _tree_map(target, shard_rows)})
        return _restore(target, buffers[part])

    options = _options(trainer)
    if load_optimizer is None:
        # Not `get_state_dict`: it would initialise the optimizer's state (a zero step).
        model = get_model_state_dict(trainer.model, options=options)
        set_model_state_dict(trainer.model, read("model", load, model), options=options)
        return
    model, optim = get_state_dict(trainer.model, trainer.optimizer, options=options)
    restored_model = read("model", load, model)
    set_state_dict(
        trainer.model,
        trainer.optimizer,
        model_state_dict=restored_model,
        optim_state_dict=read("optimizer", load_optimizer, optim),
        options=options,
    )
