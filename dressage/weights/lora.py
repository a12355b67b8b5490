"""Publishing LoRA adapters (`spec.model.lora`): a version is an adapter every engine loads by
name, from the adapter directory the trainer wrote (`dressage.trainer.lora.write_adapter`).

The publish flow is `DiskPublisher`'s (the proxy pauses generation as the job's pause mode
says, the engines load the new version, generation continues on it, lagging engines are caught
up in the background) with one change: where an engine would load a whole checkpoint
(`/update_weights_from_disk`), it loads the adapter (`/load_lora_adapter {lora_name: vN,
lora_path: <dir>}`), megabytes instead of the model. The base weights stay as the engines
started them: `v0` is the base, and publishing it loads nothing. The proxy names the current
version's adapter in every generation (`dressage.proxy.adapters`), so the adapter is in use
from the moment generation continues.

Adapters older than the newest `keep` are unloaded after each publish, in the background: SGLang
refuses the name to new requests at once and finishes the unload only when no request in
flight uses the adapter (`dressage.engine.lora`), so a turn still running under an old adapter
(an `in_place` pause) completes under it, and the publish does not wait for it.

Which engine has which adapter is tracked here by URL (an engine reports only its base
version): an engine that restarts comes back without adapters and, since the publisher still
counts it as having them, is not caught up until the next publish; its requests for the current
adapter are refused meanwhile (HTTP 400, "not loaded"), which the rollout retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from dressage.api.lora import ADAPTERS_KEPT
from dressage.engine.errors import EngineRequestError
from dressage.engine.lora import load_lora_adapter, unload_lora_adapter
from dressage.weights.disk import CATCH_UP_INTERVAL_S, DiskPublisher
from dressage.weights.engines import EngineSource, failures_by_url

log = logging.getLogger("dressage.publish")

ADAPTER_CONFIG = "adapter_config.json"
KEEP_ADAPTERS = ADAPTERS_KEPT
"""Adapters each engine keeps loaded: the current version's and the one before (a turn still
running under it, or about to be refused by the staleness window, finishes under it)."""


def is_adapter(path: Path) -> bool:
    """Whether `path` is a PEFT adapter directory (else the base model: nothing to load)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


class LoraPublisher(DiskPublisher):
    """Loads each version's adapter on the engines of `source` (see the module docstring)."""

    def __init__(
        self,
        source: EngineSource,
        *,
        keep: int = KEEP_ADAPTERS,
        pause_mode: str = "in_place",
        update_timeout_s: float | None = None,
        catch_up_interval_s: float | None = CATCH_UP_INTERVAL_S,
    ) -> None:
        super().__init__(
            source,
            pause_mode=pause_mode,
            update_timeout_s=update_timeout_s,
            catch_up_interval_s=catch_up_interval_s,
        )
        if keep < 1:
            raise ValueError("keep must be >= 1 (the current adapter)")
        self.keep = keep
        self.loaded: dict[str, list[str]] = {}
        """Each engine's adapters, oldest first, as this publisher loaded them."""
        self._unloads: set[asyncio.Task[None]] = set()

    async def _update(
        self, urls: Sequence[str], model_path: Path, version: str, *, held: bool = True
    ) -> dict[str, BaseException]:
        """Load the adapter as `version` on each of `urls` (`held` does not apply: loading an
        adapter leaves the base weights and the cache as they are)."""
        if not is_adapter(model_path):
            return {}  # the base model: what every engine serves without an adapter
        results = await asyncio.gather(
            *(self._load(url, model_path, version) for url in urls), return_exceptions=True
        )
        return failures_by_url(urls, results)

    async def _load(self, url: str, model_path: Path, version: str) -> None:
        client = self.source.client(url)
        try:
            timeout_s = self.update_timeout_s
            await load_lora_adapter(client, version, str(model_path), timeout_s=timeout_s)
        except EngineRequestError as exc:
            # A trainer that restarted publishes again what the engines already have.
            if "already loaded" not in exc.message:
                raise
        names = self.loaded.setdefault(url, [])
        if version not in names:
            names.append(version)
        while len(names) > self.keep:
            self._unload_later(url, names.pop(0))

    def _unload_later(self, url: str, name: str) -> None:
        task = asyncio.create_task(self._unload(url, name))
        self._unloads.add(task)
        task.add_done_callback(self._unloads.discard)

    async def _unload(self, url: str, name: str) -> None:
        try:
            await unload_lora_adapter(self.source.client(url), name)
        except Exception as exc:  # an engine gone or restarted has nothing to unload
            log.warning("engine %s did not unload LoRA adapter %s: %s", url, name, exc)

    async def unloads_done(self) -> None:
        """Wait for the unloads started so far (each ends when no request uses its adapter)."""
        await asyncio.gather(*list(self._unloads))

    async def _catch_up_locked(self) -> list[str]:
        if self.current is None:
            return []
        model_path, version = self.current
        if not is_adapter(model_path):
            return []
        urls = await self.source.targets()
        lagging = [url for url in urls if version not in self.loaded.get(url, [])]
        return await self._bring_up(lagging, model_path, version, "LoRA adapter")

    async def aclose(self) -> None:
        for task in list(self._unloads):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await super().aclose()
