"""The model-update lock: weight updates wait for in-flight generations, as in SGLang.

SGLang's tokenizer manager holds `model_update_lock.reader_lock` for a generation's whole
life (`generate_request`, both 0.5.2 and 0.5.23) and takes the writer lock for a weight update
(`update_weights_from_disk`, `update_weights_from_distributed`), so an update waits until every
running generation has finished, and generations that arrive meanwhile wait behind it: a
waiting writer keeps new readers out (`srt/utils/aio_rwlock.py` `RWLock.acquire_reader`:
"Wait until there is no active writer or waiting writer"). 0.5.23 skips the lock while
generation is paused (`ReleaseProfile.update_skips_lock_when_paused`).

Pure asyncio; one instance per engine, used on its event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class ModelUpdateLock:
    """A writer-preferring readers-writer lock."""

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0

    @property
    def readers(self) -> int:
        return self._readers

    @property
    def busy(self) -> bool:
        """Whether a generation or an update holds the lock."""
        return self._writer or self._readers > 0

    async def wait_idle(self) -> None:
        """Return once nothing holds the lock (SGLang's pause in `abort` mode waits so for the
        aborted generations to have returned)."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self.busy)

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._writer and self._waiting_writers == 0)
            self._readers += 1
        try:
            yield
        finally:
            async with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        async with self._cond:
            self._waiting_writers += 1
            try:
                await self._cond.wait_for(lambda: not self._writer and self._readers == 0)
                self._writer = True
            finally:
                self._waiting_writers -= 1
                if not self._writer:  # given up (cancelled): readers held back may go
                    self._cond.notify_all()
        try:
            yield
        finally:
            async with self._cond:
                self._writer = False
                self._cond.notify_all()
