"""Resumable training state: sharded weights and optimizer, version counter, data position.

Layout under a run directory:

    weights/<version>/              Hugging Face checkpoint published as `<version>` (config.json,
                                    model.safetensors in the serving dtype, tokenizer files)
    checkpoints/step-<N>/state.json the counters after N completed steps, the world size and
                                    whether the checkpoint has optimizer state
    checkpoints/step-<N>/rank-<R>/  rank R's shards of the float32 master weights and, where
                                    `state.json` says so, of the optimizer state
                                    (`torch.distributed.checkpoint`, one directory per rank,
                                    written without collectives)
    checkpoints/step-<N>/rank-<R>.done  written once rank R's shards are on disk
    checkpoints/latest.json         {"step": N}: the newest complete checkpoint, written by
                                    the rank that completes it

A checkpoint is complete when its `state.json` and the `.done` marker of every rank exist;
resume takes the newest complete one, so a run killed at any moment (mid-write included)
resumes from the last complete step. Each rank writes its shards from a CPU snapshot in a
thread of its own, without collectives, so the session may let training and the publishing of
the next weight version go on while the optimizer state is still being written.

A checkpoint resumes on a gang of any world size. On the world size that wrote it each rank
reads its own directory. On another (`spec.trainer.nodes` or `gpusPerNode` changed) each rank
rebuilds its new shards from the old ranks' files, which shared storage lets every rank read:
FSDP2 cuts every parameter, and the AdamW moments shaped like it, on dim 0 the way
`torch.chunk` does (`chunk_rows`: uneven, the last ranks' chunks possibly empty), so the old
ranks' shards in rank order make up the full tensor and a new rank copies the rows of its
chunk out of the old shards that hold them (`source_slices`). An entry every old rank holds
whole (AdamW's scalar `step`, a replicated buffer) is read from old rank 0, and so are the
values that are not tensors (the optimizer's param groups). Reads go one tensor of one old
rank at a time, so a rank holds its own new shards plus one old shard, never the whole
model. A checkpoint that cannot be cut this way (an entry missing, or old shards that neither
make up nor repeat the new tensor's shape: another model) is refused, naming the entry.
The weights and an older checkpoint's optimizer state (`optimizer_step`) may have been
written by gangs of different sizes; each is read, or resharded, on its own.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dressage.data.versions import version_label


@contextmanager
def _local_checkpoint_io() -> Iterator[None]:
    # Each rank reads and writes its own directory without collectives (`no_dist`), on
    # purpose; torch.distributed.checkpoint warns about exactly that.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def chunk_rows(length: int, parts: int, index: int) -> tuple[int, int]:
    """Rows `[start, stop)` of dim 0 that part `index` of `parts` holds of a tensor with
    `length` rows, cut as `torch.chunk` (and FSDP2) cut it: parts of `ceil(length / parts)`
    rows, the last one shorter, those past the end empty."""
    if parts < 1 or not 0 <= index < parts:
        raise ValueError(f"part {index} of {parts} does not exist")
    size = -(-length // parts)
    return min(index * size, length), min((index + 1) * size, length)


def source_slices(old_rows: Sequence[int], start: int, stop: int) -> list[tuple[int, int, int]]:
    """Where rows `[start, stop)` of a tensor lie when old rank `r` holds the next
    `old_rows[r]` of its rows: `(old_rank, local_start, local_stop)` for each old shard that
    holds some of them, in row order."""
    out = []
    offset = 0
    for rank, rows in enumerate(old_rows):
        lo, hi = max(start, offset), min(stop, offset + rows)
        if lo < hi:
            out.append((rank, lo - offset, hi - offset))
        offset += rows
    if start < stop and (start < 0 or stop > offset):
        raise ValueError(f"rows {start}..{stop} lie outside the {offset} rows of the shards")
    return out


def reshard_plan(
    old_shapes: Sequence[tuple[int, ...] | None], rows: ShardRows, local_rows: int
) -> list[tuple[int, int, int, int]] | None:
    """How to build a local tensor holding `local_rows` rows from `rows.start` of a tensor of
    `rows.shape` out of the old ranks' shards of it (shapes `old_shapes`, in rank order):
    `(old_rank, old_start, old_stop, local_start)` copies, in order. Old shards that make up
    the tensor on dim 0 are cut (`source_slices`); old shards that each hold all of it (a
    0-dim tensor, a replicated one) are read from rank 0. None when they do neither."""
    shape = tuple(rows.shape)
    if any(s is None for s in old_shapes) or not old_shapes:
        return None
    olds = [tuple(s) for s in old_shapes if s is not None]
    if not shape:
        return [(0, 0, 0, 0)] if all(s == () for s in olds) else None
    stop = rows.start + local_rows
    if rows.start < 0 or stop > shape[0]:
        return None
    if (
        all(len(s) == len(shape) and s[1:] == shape[1:] for s in olds)
        and sum(s[0] for s in olds) == shape[0]
    ):
        return [
            (rank, lo, hi, lo + offset - rows.start)
            for rank, lo, hi in source_slices([s[0] for s in olds], rows.start, stop)
            for offset in [sum(s[0] for s in olds[:rank])]
        ]
    if all(s == shape for s in olds):
        return [(0, rows.start, stop, 0)] if stop > rows.start else []
    return None


def _rows(tensor: Any) -> int:
    return int(tensor.shape[0]) if tensor.dim() > 0 else 0


@dataclass(frozen=True)
class ShardRows:
    """Which part of a full tensor a rank's local tensor is: rows `start` onwards (as many as
    the local tensor has) of a tensor of `shape` (a 0-dim tensor: all of it)."""

    shape: tuple[int, ...]
    start: int = 0


def _is_leaf(value: Any) -> bool:
    # torch.distributed.checkpoint flattens dicts and every list holding a tensor, dict or
    # such list; anything else (a tuple, a list of names, a number) is one entry.
    import torch

    if isinstance(value, dict):
        return False
    if isinstance(value, list):
        return all(
            not isinstance(v, torch.Tensor | dict) and (not isinstance(v, list) or _is_leaf(v))
            for v in value
        )
    return True


def _entries(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """`(key, container, index)` of every entry of `tree` under the key
    torch.distributed.checkpoint stores it by (dict keys and list indices joined by dots)."""
    items: Iterable[tuple[Any, Any]] = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for index, value in items:
        key = f"{prefix}.{index}" if prefix else str(index)
        if _is_leaf(value):
            yield key, tree, index
        else:
            yield from _entries(value, key)


@dataclass
class TrainState:
    """What the trainer must remember across restarts (besides tensors)."""

    step: int = 0
    """Completed optimizer steps."""
    version_index: int = 0
    """Index of the newest published weight version; the trainer owns this sequence."""
    collector: dict[str, Any] = field(default_factory=dict)
    """The collector's `state_dict()` (its data position)."""
    record: dict[str, Any] | None = None
    """The run's history record of `step` as known when the step was committed (before its
    weights were published), so a run killed before writing its history line can restore it."""

    @property
    def version(self) -> str:
        return version_label(self.version_index)

    def next_version(self) -> str:
        return version_label(self.version_index + 1)


class RunDir:
    """Paths and checkpoint I/O of one job's run directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def weights_root(self) -> Path:
        return self.root / "weights"

    @property
    def checkpoints_root(self) -> Path:
        return self.root / "checkpoints"

    def weights_dir(self, version: str) -> Path:
        return self.weights_root / version

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_root / f"step-{step:06d}"

    def rank_dir(self, step: int, rank: int) -> Path:
        return self.checkpoint_dir(step) / f"rank-{rank}"

    # --- reading ------------------------------------------------------------------------

    def _state_file(self, step: int) -> Path:
        return self.checkpoint_dir(step) / "state.json"

    def is_complete(self, step: int) -> bool:
        """Whether step `step`'s state and the shards of every rank are all on disk."""
        try:
            raw = json.loads(self._state_file(step).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        world = int(raw.get("world_size", 1))
        return all(
            self.rank_dir(step, r).with_name(f"rank-{r}.done").is_file() for r in range(world)
        )

    def steps(self) -> list[int]:
        """Steps with a checkpoint directory (complete or not), ascending."""
        found = []
        if self.checkpoints_root.is_dir():
            for path in self.checkpoints_root.glob("step-*"):
                try:
                    found.append(int(path.name.removeprefix("step-")))
                except ValueError:
                    continue
        return sorted(found)

    def latest_step(self) -> int | None:
        """Step of the newest complete checkpoint, or None when there is none."""
        for step in reversed(self.steps()):
            if self.is_complete(step):
                return step
        return None

    def load_state(self, step: int | None = None) -> TrainState | None:
        """The state of checkpoint `step` (default: the newest complete one), or None for a
        fresh run."""
        step = self.latest_step() if step is None else step
        if step is None:
            return None
        raw = json.loads(self._state_file(step).read_text(encoding="utf-8"))
        return TrainState(
            step=int(raw["step"]),
            version_index=int(raw["version_index"]),
            collector=dict(raw.get("collector", {})),
            record=raw.get("record"),
        )

    def world_size(self, step: int) -> int:
        """The trainer world size that wrote checkpoint `step`."""
        raw = json.loads(self._state_file(step).read_text(encoding="utf-8"))
        return int(raw.get("world_size", 1))

    def has_optimizer(self, step: int) -> bool:
        """Whether checkpoint `step` holds the optimizer state as well as the weights."""
        raw = json.loads(self._state_file(step).read_text(encoding="utf-8"))
        return bool(raw.get("optimizer", True))

    def optimizer_step(self, step: int) -> int | None:
        """The newest complete checkpoint at or before `step` that holds optimizer state
        (None when there is none), whatever world size wrote it."""
        for earlier in reversed(self.steps()):
            if earlier > step or not self.is_complete(earlier):
                continue
            if self.has_optimizer(earlier):
                return earlier
        return None

    def load_shards(self, step: int, rank: int, buffers: dict[str, Any]) -> None:
        """Read rank `rank`'s shards of checkpoint `step` into `buffers` in place."""
        from torch.distributed.checkpoint.state_dict_loader import load

        with _local_checkpoint_io():
            load(buffers, checkpoint_id=str(self.rank_dir(step, rank)), no_dist=True)

    def load_local(
        self, step: int, rank: int, world_size: int, buffers: dict[str, Any], layout: Any
    ) -> None:
        """Fill `buffers`, the local shards of rank `rank` of a gang of `world_size`, from
        checkpoint `step`: its own directory when that world size wrote it, otherwise
        resharded from every old rank's (`reshard`). `layout` has the structure of `buffers`
        with a `ShardRows` for every tensor."""
        if self.world_size(step) == world_size:
            self.load_shards(step, rank, buffers)
        else:
            self.reshard(step, buffers, layout)

    def _shapes(self, step: int, rank: int) -> dict[str, tuple[int, ...] | None]:
        from torch.distributed.checkpoint.filesystem import FileSystemReader
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        metadata = FileSystemReader(str(self.rank_dir(step, rank))).read_metadata()
        return {
            key: tuple(meta.size) if isinstance(meta, TensorStorageMetadata) else None
            for key, meta in metadata.state_dict_metadata.items()
        }

    def _read(
        self, step: int, rank: int, key: str, shape: tuple[int, ...] | None, dtype: Any
    ) -> Any:
        import torch
        from torch.distributed.checkpoint.state_dict_loader import load

        buffer = {key: torch.empty(shape or (), dtype=dtype)}
        with _local_checkpoint_io():
            load(buffer, checkpoint_id=str(self.rank_dir(step, rank)), no_dist=True)
        return buffer[key]

    def reshard(self, step: int, buffers: dict[str, Any], layout: Any) -> None:
        """Fill `buffers` with the rows `layout` names of every tensor of checkpoint `step`,
        cut from the shards of all the ranks that wrote it, one old shard at a time (see the
        module docstring); the entries that are not tensors come from old rank 0."""
        import torch

        world = self.world_size(step)
        shapes = [self._shapes(step, r) for r in range(world)]
        rows = dict((key, container[index]) for key, container, index in _entries(layout))
        others: dict[str, Any] = {}
        where: dict[str, tuple[Any, Any]] = {}
        for key, container, index in _entries(buffers):
            missing = [r for r in range(world) if key not in shapes[r]]
            if missing:
                raise ValueError(
                    f"cannot resume from checkpoint {self.checkpoint_dir(step)}: rank "
                    f"{missing[0]}'s shards have no {key!r} (written for another model?)"
                )
            target = container[index]
            if not isinstance(target, torch.Tensor):
                others[key] = target
                where[key] = (container, index)
                continue
            if rows[key] is None:
                raise ValueError(
                    f"cannot reshard checkpoint {self.checkpoint_dir(step)} into {key!r}: "
                    "this gang does not shard it on dim 0"
                )
            plan = reshard_plan([sh[key] for sh in shapes], rows[key], _rows(target))
            if plan is None:
                raise ValueError(
                    f"cannot resume from checkpoint {self.checkpoint_dir(step)} on this gang: "
                    f"the shards of {key!r} written by its {world} ranks have shapes "
                    f"{[sh[key] for sh in shapes]}, which neither make up nor repeat its "
                    f"shape {list(rows[key].shape)} (written for another model?)"
                )
            for source, lo, hi, offset in plan:
                old = self._read(step, source, key, shapes[source][key], target.dtype)
                if target.dim() == 0:
                    target.copy_(old)
                else:
                    target.narrow(0, offset, hi - lo).copy_(old.narrow(0, lo, hi - lo))
                del old
        if others:
            from torch.distributed.checkpoint.state_dict_loader import load

            with _local_checkpoint_io():
                load(others, checkpoint_id=str(self.rank_dir(step, 0)), no_dist=True)
            for key, (container, index) in where.items():
                container[index] = others[key]

    # --- writing --------------------------------------------------------------------------

    def write_weights(self, version: str, save: Any, extra_files: Iterable[Path] = ()) -> Path:
        """Write weights for `version` with `save(dir)` plus `extra_files`, atomically (rank 0)."""
        final = self.weights_dir(version)
        tmp = final.with_name(f".{final.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save(tmp)
        for src in extra_files:
            shutil.copy2(src, tmp / src.name)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        return final

    def write_state(self, state: TrainState, world_size: int, *, optimizer: bool = True) -> Path:
        """Start checkpoint `state.step`: write its `state.json` (rank 0, before any shard),
        saying whether the ranks' shards include the optimizer state."""
        final = self.checkpoint_dir(state.step)
        shutil.rmtree(final, ignore_errors=True)
        final.mkdir(parents=True)
        raw = asdict(state) | {"world_size": world_size, "optimizer": optimizer}
        tmp = final / "state.json.tmp"
        tmp.write_text(json.dumps(raw, indent=2), encoding="utf-8")
        os.replace(tmp, self._state_file(state.step))
        return final

    def save_shards(self, step: int, rank: int, shards: dict[str, Any]) -> Future[None]:
        """Write rank `rank`'s `shards` (a CPU snapshot) of checkpoint `step` in a background
        thread, then its `.done` marker. The future's result is None or the write's error."""
        path = self.rank_dir(step, rank)

        def write() -> None:
            from torch.distributed.checkpoint.state_dict_saver import save

            with _local_checkpoint_io():
                save(shards, checkpoint_id=str(path), no_dist=True)
            path.with_name(f"rank-{rank}.done").write_text("", encoding="utf-8")
            if self.is_complete(step):
                # The last rank to finish sees every marker (more than one may: same content).
                pointer = self.checkpoints_root / "latest.json"
                tmp = pointer.with_name(f".latest.json.{rank}.tmp")
                tmp.write_text(json.dumps({"step": step}), encoding="utf-8")
                os.replace(tmp, pointer)

        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        try:
            return executor.submit(write)
        finally:
            # The thread finishes the write (the interpreter waits for it at exit).
            executor.shutdown(wait=False)

    def prune(
        self,
        keep_steps: int,
        keep_versions: Iterable[str],
        keep_checkpoints: Iterable[int] = (),
    ) -> None:
        """Delete the checkpoints of steps at or before `latest - keep_steps` (newer, possibly
        still being written, are kept) except `keep_checkpoints`, and the weights of versions
        not in `keep_versions`."""
        latest = self.latest_step()
        if latest is None:
            return
        keep = set(keep_versions)
        kept_steps = set(keep_checkpoints)
        for step in self.steps():
            if step <= latest - keep_steps and step not in kept_steps:
                shutil.rmtree(self.checkpoint_dir(step), ignore_errors=True)
        if self.weights_root.is_dir():
            for path in self.weights_root.iterdir():
                if path.is_dir() and not path.name.startswith(".") and path.name not in keep:
                    shutil.rmtree(path, ignore_errors=True)
