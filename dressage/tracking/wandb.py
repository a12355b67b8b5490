"""Weights & Biases: one W&B run per run directory.

The manifest is the run's config, each step's scalars a history row at that step (a `/` makes
W&B's sections), each plot of the run report an image `plots/<name>` at the last step. Offline
mode writes the run under `wandb/` in the run directory (`wandb sync` uploads it later); the
run's files always go there, never to the working directory. Online mode needs an API key
(`WANDB_API_KEY`): without one `wandb.init` fails at once, before the first step. A run
resumed from its checkpoint resumes its W&B run (the same run id; offline, in a directory of
its own under that id).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dressage.api.tracking import WandbSpec
from dressage.tracking.base import RunContext, requirement_error


class WandbTracker:
    """One W&B run."""

    def __init__(self, settings: WandbSpec, context: RunContext) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise requirement_error("wandb", "wandb", exc) from exc
        self._wandb = wandb
        context.run_dir.mkdir(parents=True, exist_ok=True)
        # The W&B run this run directory logged to before, when it resumes from a checkpoint.
        earlier = context.recall("wandb")
        self._run: Any = wandb.init(
            id=earlier,
            resume="allow" if earlier else None,
            project=settings.project,
            entity=settings.entity,
            mode=settings.mode,
            name=settings.name or context.name,
            tags=settings.tags or None,
            config=context.config,
            dir=str(context.run_dir),
            # The run's own lines stay the run's output: W&B neither prints its banner nor
            # wraps stdout and stderr to capture them.
            settings=wandb.Settings(silent=True, console="off"),
        )
        context.remember("wandb", self._run.id)
        self.directory = Path(self._run.dir).parent
        """The W&B run's directory (`wandb/offline-run-...` or `wandb/run-...`)."""

    def log_step(self, step: int, scalars: Mapping[str, float]) -> None:
        self._run.log(dict(scalars), step=step)

    def log_plots(self, step: int, plots: Sequence[Path]) -> None:
        images = {f"plots/{p.stem}": self._wandb.Image(str(p)) for p in plots}
        self._run.log(images, step=step)

    def close(self) -> None:
        self._run.finish()


def open_tracker(settings: WandbSpec, context: RunContext) -> WandbTracker:
    return WandbTracker(settings, context)
