"""The interface every weight publisher implements, whatever carries the weights.

The training loop holds one `Publisher` on rank 0 (and, for a `collective` one, one on every
other trainer rank too): after each step it calls `publish(model_path, version)`, before the
first step `sync` or `versions` (`dressage.orchestrator.loop.sync_engines`). Torch-free.
"""

from __future__ import annotations

import abc
from pathlib import Path


class Publisher(abc.ABC):
    """Makes a new weight version live on every engine."""

    @property
    @abc.abstractmethod
    def collective(self) -> bool:
        """Whether every trainer rank must enter `publish` together (the weights are gathered
        over the trainer gang as they are sent); else only rank 0 publishes."""

    @abc.abstractmethod
    async def publish(self, model_path: Path, version: str) -> None:
        """Make the weights of `version` live on every engine (`model_path`: the step's
        checkpoint, which a transport that sends the trainer's memory ignores)."""

    @abc.abstractmethod
    async def versions(self) -> list[str | None]:
        """The weight version each engine reports."""

    @abc.abstractmethod
    async def sync(self, model_path: Path, version: str) -> bool:
        """Make `version` current without a pause, engines that lag loading it; whether any
        engine loaded it."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Stop background work and close the clients this publisher opened."""
