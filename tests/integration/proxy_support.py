"""Shared pieces of the proxy's integration tests: engine control, a scripted engine, polling."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from dressage.api.sglang import SGLANG_NEWEST_TESTED
from dressage.engine import EngineClient
from dressage.model.tiny import resolve_model_source
from tests.scripted_http import Status


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


class ScriptedEngine:
    """Reports its weight version and takes (or, with `fail`, refuses) weight updates, where
    SGLang `release` has them: 0.5.2 `/get_weight_version` and `/get_server_info`, 0.5.23
    `/model_info` and `/server_info` (the other names answer 404 there). Every request is
    recorded (path and JSON body) in `requests`. Served by `tests.scripted_http`."""

    def __init__(self, release: str = SGLANG_NEWEST_TESTED) -> None:
        self.version = "v0"
        self.fail = False
        self.refuse_pause = False
        self.release = release
        self.requests: list[tuple[str, Any]] = []

    async def answer(self, path: str, body: bytes) -> object:
        self.requests.append((path, json.loads(body) if body else None))
        old = self.release == "0.5.2"
        if path == "/pause_generation" and self.refuse_pause:
            return Status(500, {"error": "cannot pause"})
        if path in (("/model_info", "/server_info") if old else ("/get_weight_version",)):
            return Status(404, {"detail": "Not Found"})
        if path in ("/get_weight_version", "/model_info"):
            return {"weight_version": self.version, "model_path": "m"}
        if path in ("/get_server_info", "/server_info"):
            return {"version": self.release}
        if path == "/update_weights_from_disk":
            if self.fail:
                return {"success": False, "message": "cannot read the checkpoint"}
            self.version = json.loads(body)["weight_version"]
            return {"success": True, "message": "updated", "num_paused_requests": 0}
        return {}

    def sent(self, *paths: str) -> list[tuple[str, Any]]:
        """The requests to any of `paths`, in order."""
        return [(p, b) for p, b in self.requests if p in paths]

    def version_reads(self) -> int:
        return len(self.sent("/get_weight_version", "/model_info"))
