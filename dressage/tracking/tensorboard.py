"""TensorBoard: event files in the run directory (or `spec.tracking.tensorboard.logDir`).

Each step's scalars under their names (a `/` groups them in TensorBoard's tabs), the manifest as
the text `config` at step 0, each plot of the run report as the image `plots/<name>` at the
last step. Written with torch's `SummaryWriter` (the trainer has torch; the writer needs the
`tensorboard` package).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from dressage.api.tracking import TensorBoardSpec
from dressage.tracking.base import RunContext, requirement_error


def log_dir(settings: TensorBoardSpec, run_dir: Path) -> Path:
    """The event files' directory: `logDir` (relative to the run directory), else
    `tensorboard/` there."""
    return run_dir / (settings.log_dir or "tensorboard")


class TensorBoardTracker:
    """One run's event files."""

    def __init__(self, settings: TensorBoardSpec, context: RunContext) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise requirement_error("tensorboard", "tensorboard", exc) from exc
        self.directory = log_dir(settings, context.run_dir)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=str(self.directory))
        config = yaml.safe_dump(context.config, sort_keys=False)
        # Markdown: the manifest as a code block, indented.
        self._writer.add_text("config", "\n".join(f"    {line}" for line in config.splitlines()), 0)

    def log_step(self, step: int, scalars: Mapping[str, float]) -> None:
        for name, value in scalars.items():
            self._writer.add_scalar(name, value, step)

    def log_plots(self, step: int, plots: Sequence[Path]) -> None:
        from matplotlib.image import imread

        for plot in plots:
            self._writer.add_image(f"plots/{plot.stem}", imread(plot), step, dataformats="HWC")
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def open_tracker(settings: TensorBoardSpec, context: RunContext) -> TensorBoardTracker:
    return TensorBoardTracker(settings, context)
