"""Resumable training state: weights, optimizer, weight-version counter and data position.

Layout under a run directory:

    weights/<version>/          Hugging Face checkpoint published as `<version>` (config.json,
                                model.safetensors, tokenizer files)
    checkpoints/step-<N>/       optimizer.pt + state.json after N completed steps
    checkpoints/latest.json     {"step": N}: the newest complete checkpoint

A checkpoint directory is complete before `latest.json` names it (the pointer is replaced
atomically), so a run killed at any moment resumes from the last complete step. The weights a
checkpoint refers to are the published weights of its version, written before it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from dressage.data.versions import version_label


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

    # --- reading ------------------------------------------------------------------------

    def latest_step(self) -> int | None:
        """Step of the newest complete checkpoint, or None when there is none."""
        pointer = self.checkpoints_root / "latest.json"
        if not pointer.is_file():
            return None
        step = json.loads(pointer.read_text(encoding="utf-8"))["step"]
        if not isinstance(step, int):
            raise ValueError(f"{pointer}: 'step' must be an integer, got {step!r}")
        return step

    def load_state(self) -> TrainState | None:
        """The newest checkpoint's state, or None for a fresh run."""
        step = self.latest_step()
        if step is None:
            return None
        raw = json.loads((self.checkpoint_dir(step) / "state.json").read_text(encoding="utf-8"))
        return TrainState(
            step=int(raw["step"]),
            version_index=int(raw["version_index"]),
            collector=dict(raw.get("collector", {})),
            record=raw.get("record"),
        )

    def load_optimizer(self, step: int, optimizer: torch.optim.Optimizer) -> None:
        state = torch.load(self.checkpoint_dir(step) / "optimizer.pt", map_location="cpu")
        optimizer.load_state_dict(state)

    # --- writing (rank 0 only) ------------------------------------------------------------

    def write_weights(self, version: str, save: Any, extra_files: Iterable[Path] = ()) -> Path:
        """Write weights for `version` with `save(dir)` plus `extra_files`, atomically."""
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

    def write_checkpoint(self, state: TrainState, optimizer: torch.optim.Optimizer) -> Path:
        """Write state + optimizer for `state.step`, then point `latest.json` at it."""
        final = self.checkpoint_dir(state.step)
        tmp = final.with_name(f".{final.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps(asdict(state), indent=2), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        pointer = self.checkpoints_root / "latest.json"
        pointer_tmp = pointer.with_suffix(".json.tmp")
        pointer_tmp.write_text(json.dumps({"step": state.step}), encoding="utf-8")
        os.replace(pointer_tmp, pointer)
        return final

    def prune(self, keep_steps: int, keep_versions: Iterable[str]) -> None:
        """Delete all but the newest `keep_steps` checkpoints and weights not in `keep_versions`."""
        latest = self.latest_step()
        if latest is None:
            return
        keep = set(keep_versions)
        for path in self.checkpoints_root.glob("step-*"):
            try:
                step = int(path.name.removeprefix("step-"))
            except ValueError:
                continue
            if step <= latest - keep_steps:
                shutil.rmtree(path, ignore_errors=True)
        if self.weights_root.is_dir():
            for path in self.weights_root.iterdir():
                if path.is_dir() and not path.name.startswith(".") and path.name not in keep:
                    shutil.rmtree(path, ignore_errors=True)
