"""The weight publisher against a scripted engine on loopback: the update's time bound comes
from the job, and a failed update still continues generation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from dressage.engine.errors import EngineError
from dressage.weights.disk import DiskPublisher
from dressage.weights.engines import FixedEngines
from tests.scripted_http import scripted_server

INFO = ("/server_info", "/model_info")


class SlowEngine:
    """An SGLang 0.5.23 engine: answers pause/continue at once, reports its release and weight
    version, and holds `/update_weights_from_disk` until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.paths: list[str] = []
        self.updates: list[dict[str, object]] = []
        self.version = "v0"

    async def answer(self, path: str, body: bytes) -> object:
        self.paths.append(path)
        if path == "/update_weights_from_disk":
            await self.release.wait()
            self.updates.append(json.loads(body))
            self.version = json.loads(body)["weight_version"]
            return {"success": True, "message": "updated", "num_paused_requests": 0}
        if path == "/model_info":
            return {"model_path": "m", "weight_version": self.version}
        if path == "/server_info":
            return {"version": "0.5.23"}
        return {"message": "ok", "status": "ok"}

    @property
    def commands(self) -> list[str]:
        """The calls other than the release and version reads."""
        return [p for p in self.paths if p not in INFO]

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        async with scripted_server(self.answer) as url:
            try:
                yield url
            finally:
                self.release.set()


async def test_an_update_past_its_time_bound_fails_and_generation_still_continues(
    tmp_path: Path,
) -> None:
    engine = SlowEngine()
    async with engine.serving() as url:
        publisher = DiskPublisher(FixedEngines([url]), pause_mode="abort", update_timeout_s=0.3)
        try:
            with pytest.raises(EngineError):
                await publisher.publish(tmp_path, "v1")
        finally:
            await publisher.aclose()
    assert engine.commands == [
        "/pause_generation",
        "/update_weights_from_disk",
        "/continue_generation",
    ]


@pytest.mark.parametrize("pause_mode", ["abort", "in_place"])
async def test_an_update_within_its_time_bound_publishes(tmp_path: Path, pause_mode: str) -> None:
    engine = SlowEngine()
    engine.release.set()
    async with engine.serving() as url:
        publisher = DiskPublisher(
            FixedEngines([url]), pause_mode=pause_mode, update_timeout_s=30.0
        )
        try:
            await publisher.publish(tmp_path, "v1")
        finally:
            await publisher.aclose()
    if pause_mode == "abort":
        # Nothing is held: the update flushes the cache itself (0.5.23's
        # `UpdateWeightFromDiskReqInput.flush_cache: bool = True`), one request per engine.
        assert engine.commands == [
            "/pause_generation",
            "/update_weights_from_disk",
            "/continue_generation",
        ]
        assert "flush_cache" not in engine.updates[0]
        return
    # Held requests would make 0.5.23 refuse the update's own flush: the cache is flushed
    # once the new weights carry their label, before generation goes on.
    assert engine.commands == [
        "/pause_generation",
        "/update_weights_from_disk",
        "/flush_cache",
        "/continue_generation",
    ]
    assert engine.updates[0]["flush_cache"] is False


class _Session:
    """What `sync_engines` reads of a trainer session: its state and its weights."""

    def __init__(self, version_index: int, weights: Path) -> None:
        from dressage.trainer.checkpoint import TrainState

        self.state = TrainState(version_index=version_index)
        self.weights_dir = weights


@pytest.mark.parametrize(
    ("have_initial", "published"), [(True, False), (False, True)], ids=["same", "warm-started"]
)
async def test_before_the_first_step_engines_get_the_trainers_initial_weights_when_theirs_differ(
    tmp_path: Path, have_initial: bool, published: bool
) -> None:
    """Engines started from the staged base model while the trainer warm-started serve other
    weights under the same label `v0`; they are given the trainer's before rollout starts."""
    from dressage.orchestrator.loop import sync_engines

    engine = SlowEngine()
    engine.release.set()
    async with engine.serving() as url:
        publisher = DiskPublisher(FixedEngines([url]), pause_mode="abort")
        try:
            did = await sync_engines(
                _Session(0, tmp_path),  # type: ignore[arg-type]
                publisher,
                engines_have_initial_weights=have_initial,
            )
        finally:
            await publisher.aclose()
    assert did is published
    assert ("/update_weights_from_disk" in engine.paths) is published
