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
the next weight version go on while the optimizer state is still being written. A checkpoint
resumes only on a gang of the world size that wrote it (the shards are per rank).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Iterable, Iterator
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
        """The newest complete checkpoint at or before `step`, written by the same world size,
        that holds optimizer state (None when there is none)."""
        world = self.world_size(step)
        for earlier in reversed(self.steps()):
            if earlier > step or not self.is_complete(earlier):
                continue
            if self.world_size(earlier) == world and self.has_optimizer(earlier):
                return earlier
        return None

    def load_shards(self, step: int, rank: int, buffers: dict[str, Any]) -> None:
        """Read rank `rank`'s shards of checkpoint `step` into `buffers` in place."""
        from torch.distributed.checkpoint.state_dict_loader import load

        with _local_checkpoint_io():
            load(buffers, checkpoint_id=str(self.rank_dir(step, rank)), no_dist=True)

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
