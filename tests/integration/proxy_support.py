"""Shared pieces of the proxy's integration tests: engine control and polling."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from dressage.engine import EngineClient
from dressage.model.tiny import resolve_model_source


def tiny_checkpoint(cache_dir: Path) -> Path:
    """The tiny model's checkpoint directory (built by the engine on its first start)."""
    return resolve_model_source("builtin:tiny", cache_dir)


def new_label(prefix: str = "v") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def update_weights(engine_url: str, checkpoint: Path, version: str) -> None:
    """Publish `version` on the engine (same weights, new label: what matters is the label)."""
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            engine_url + "/update_weights_from_disk",
            json={"model_path": str(checkpoint), "weight_version": version},
        )
        response.raise_for_status()


async def engine_version(engine_url: str) -> str:
    """The weight version the engine reports, wherever its release reports it."""
    async with EngineClient(engine_url) as client:
        return str(await client.get_weight_version())


async def wait_for(
    condition: Callable[[], Awaitable[bool]], *, timeout_s: float = 30.0, what: str = ""
) -> None:
    """Poll `condition` until it holds; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.02)


async def session_busy(client: httpx.AsyncClient, session_id: str) -> bool:
    response = await client.get(f"/sessions/{session_id}")
    return response.status_code == 200 and bool(response.json()["busy"])


def metric_value(text: str, name: str) -> float:
    """Sum of a metric's samples in Prometheus text (all label sets)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head = line.split(" ")[0]
            if head == name or head.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total
