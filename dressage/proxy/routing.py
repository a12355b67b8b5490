"""The engine pool: health, load and stickiness. Pure bookkeeping; the server does the I/O.

Routing rule: a session sticks to the engine that served it while that engine is healthy
(its KV cache holds the trajectory's prefix); otherwise the healthy engine with the fewest
generations in flight is chosen (ties go to the earliest-listed engine).
"""

from __future__ import annotations

from dataclasses import dataclass

from dressage.engine.sglang_support import SGLANG_MIN_VERSION, Feature, supports
from dressage.proxy import errors
from dressage.proxy.errors import ProxyError


@dataclass
class EngineState:
    """One engine as the proxy sees it."""

    url: str
    healthy: bool = True
    inflight: int = 0
    failures: int = 0
    """Consecutive failed health checks or requests."""
    last_error: str | None = None
    release: str | None = None
    """The SGLang release the engine reports (`/get_server_info` `version`); None until known,
    and again after the engine was down (a replaced engine may run another image)."""

    def supports(self, feature: Feature) -> bool:
        """Whether the engine's release has `feature`; an unknown release is taken as the
        oldest supported one, so nothing is sent that it might not accept."""
        return supports(self.release or SGLANG_MIN_VERSION, feature)


class EnginePool:
    """The engines behind the proxy."""

    def __init__(self, urls: list[str]) -> None:
        if not urls:
            raise ValueError("an engine pool needs at least one engine URL")
        self.engines = [EngineState(url) for url in urls]
        self._by_url = {e.url: e for e in self.engines}

    def __getitem__(self, url: str) -> EngineState:
        return self._by_url[url]

    def healthy(self) -> list[EngineState]:
        return [e for e in self.engines if e.healthy]

    def pick(
        self, sticky: str | None = None, *, exclude: frozenset[str] = frozenset()
    ) -> EngineState:
        """The engine for the next request of a session stuck to `sticky` (if any)."""
        if sticky is not None and sticky not in exclude:
            engine = self._by_url.get(sticky)
            if engine is not None and engine.healthy:
                return engine
        candidates = [e for e in self.engines if e.healthy and e.url not in exclude]
        if not candidates:
            raise ProxyError(
                503,
                errors.NO_HEALTHY_ENGINE,
                "no healthy inference engine is available",
                detail={
                    "engines": {e.url: e.last_error or "unhealthy" for e in self.engines},
                },
                headers={"Retry-After": "1"},
            )
        return min(candidates, key=lambda e: e.inflight)

    def mark_down(self, url: str, reason: str) -> None:
        engine = self._by_url[url]
        engine.healthy = False
        engine.failures += 1
        engine.last_error = reason
        engine.release = None

    def mark_up(self, url: str) -> None:
        engine = self._by_url[url]
        engine.healthy = True
        engine.failures = 0
        engine.last_error = None

    def snapshot(self) -> list[dict[str, object]]:
        return [
            {
                "url": e.url,
                "healthy": e.healthy,
                "inflight": e.inflight,
                "last_error": e.last_error,
                "sglang_version": e.release,
            }
            for e in self.engines
        ]
