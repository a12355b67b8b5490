"""`ProxyState`: everything one proxy app owns, shared by its endpoints (no module globals)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from dressage.proxy.config import ProxyConfig
from dressage.proxy.engine_pool import EnginePool
from dressage.proxy.generation import Generator, PauseGate
from dressage.proxy.metrics import ProxyMetrics
from dressage.proxy.sessions import SessionStore
from dressage.proxy.upstream import EngineConnections


@dataclass
class ProxyState:
    """The state of one app instance. `connections` and `generator` exist while it serves
    (they are made in its lifespan, on the serving event loop)."""

    config: ProxyConfig
    clock: Callable[[], float]
    """Drives session expiry and activity times."""
    store: SessionStore
    pool: EnginePool
    gate: PauseGate
    metrics: ProxyMetrics
    connections: EngineConnections | None = None
    generator: Generator | None = None
    inflight: int = 0
    """Generating requests admitted now (bounded by `--max-concurrency`)."""
    engine_set_error: str | None = None
    """Why the engine URLs file was last not applied (None once it was)."""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    """Background loops running while the app serves."""
