"""Weight publishing: make a new weight version live on every engine.

The sequence, after the checkpoint of a step is written (rank 0 only):

1. pause generation: through the proxy when there is one (it closes its gate and pauses every
   engine), else on every engine;
2. `POST /update_weights_from_disk {model_path, weight_version}` on every engine;
3. continue generation (proxy or engines).

Continue is sent even when an update failed, so a failed publish never leaves engines paused;
the failure is then raised. Version labels are issued by the trainer (`TrainState`), never by
the engines. This module is torch-free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from dressage.engine.client import EngineClient
from dressage.proxy.client import ProxyRolloutClient


class WeightPublisher:
    """Pushes checkpoints to engines, pausing generation around the swap."""

    def __init__(
        self,
        engine_urls: Sequence[str],
        *,
        proxy: ProxyRolloutClient | None = None,
        pause_mode: str = "in_place",
        update_timeout_s: float | None = None,
    ) -> None:
        if not engine_urls:
            raise ValueError("a weight publisher needs at least one engine URL")
        self.engines = [EngineClient(url) for url in engine_urls]
        self.proxy = proxy
        self.pause_mode = pause_mode
        self.update_timeout_s = update_timeout_s
        """Bound on one engine's weight update (`spec.inference.weightUpdateTimeoutSeconds`)."""

    async def publish(self, model_path: Path, version: str) -> None:
        """Make the weights in `model_path` live on every engine as `version`."""
        await self._pause()
        try:
            await asyncio.gather(
                *(
                    e.update_weights_from_disk(
                        str(model_path), version, timeout_s=self.update_timeout_s
                    )
                    for e in self.engines
                )
            )
        finally:
            await self._resume()

    async def versions(self) -> list[str | None]:
        """The weight version each engine reports."""
        return list(await asyncio.gather(*(e.get_weight_version() for e in self.engines)))

    async def aclose(self) -> None:
        await asyncio.gather(*(e.aclose() for e in self.engines))

    async def _pause(self) -> None:
        if self.proxy is not None:
            await self.proxy.pause(self.pause_mode)
        else:
            await asyncio.gather(*(e.pause_generation(self.pause_mode) for e in self.engines))

    async def _resume(self) -> None:
        if self.proxy is not None:
            await self.proxy.resume()
        else:
            await asyncio.gather(*(e.continue_generation() for e in self.engines))
