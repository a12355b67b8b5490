"""The engine pool: membership, health, weight versions, load and stickiness. Pure
bookkeeping; the server does the I/O.

Routable engines. An engine is routed to while it is healthy and, once the pool knows the
job's current weight version (`target_version`, set by the weight publisher), only while it
serves that version: an engine that joined the job (a scale-up, a replaced pod) or missed an
update serves other weights than the trajectories it would extend, so it is held out until the
publisher brought it up to date. Until the pool is told a version, every healthy engine is
routable.

Routing rule: a session sticks to the engine that served it while that engine is routable
(its KV cache holds the trajectory's prefix); otherwise, in a pool of up to `EXACT_PICK_UP_TO`
engines, the routable engine with the fewest generations in flight is chosen, ties going to
each engine in turn (the scan starts one engine further each time: with ties to the
earliest-listed engine, a fleet below capacity loaded its first engines and left the last idle,
`benchmarks/fleet_scale.py`). A larger pool takes the less loaded of two routable engines drawn
at random ("the power of two choices": the busiest engine stays within a small constant of the
mean, Mitzenmacher 2001), so a pick costs the same at 1,024 engines as at 16 instead of a scan
of every engine per request; only when two draws find no routable engine (most engines held
out) does it scan.

Membership changes at runtime (`set_urls`): a removed engine leaves the pool at once; the
requests it is serving keep their `EngineState` and finish (or fail over) as they would have.

Draining (`start_drain`): an engine that is going away (scale-down, replacement, a pod told to
stop) takes no new generation from then on, sticky sessions included, while it stays in the
pool so that its generations in flight can be aborted and resumed elsewhere
(`dressage.proxy.drain`). Draining ends when the engine is seen down (its process ended: a
replaced pod that comes back under the same URL is a new engine and is routed to once it
passes a health check), when it leaves the pool, or on `stop_drain`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dressage.engine.sglang_support import SGLANG_MIN_VERSION, Feature, supports
from dressage.proxy import errors
from dressage.proxy.errors import ProxyError

EXACT_PICK_UP_TO = 16
"""Pools up to this size pick the least loaded engine exactly; larger ones by two choices."""
_DRAWS = 8
"""Random draws a two-choice pick makes before it falls back to a scan."""


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
    """The SGLang release the engine reports (its server info's `version`); None until known,
    and again after the engine was down (a replaced engine may run another image)."""
    weight_version: str | None = None
    """The weight version the engine last reported; None until read, and again after the
    engine was down (a replaced engine starts on its base weights)."""
    version_route: str | None = None
    """The route that answered its weight version (`/model_info` or `/get_weight_version`,
    by release); None until one did, and again after the engine was down."""
    draining: bool = False
    """Going away: routed no new generation; its in-flight ones are aborted and resumed on
    another engine. Cleared when the engine is seen down (see the module doc)."""

    def supports(self, feature: Feature) -> bool:
        """Whether the engine's release has `feature`; an unknown release is taken as the
        oldest supported one, so nothing is sent that it might not accept."""
        return supports(self.release or SGLANG_MIN_VERSION, feature)


class EnginePool:
    """The engines behind the proxy. Engines listed at construction start healthy (as a fixed
    `--engine-urls` list always did); engines added later start unhealthy until a health
    check passes."""

    def __init__(self, urls: list[str], seed: int | None = None) -> None:
        """`seed` fixes the random draws and where the turns start (None: a replica of its
        own, so replicas do not load the same engines in step)."""
        self.engines = [EngineState(url) for url in urls]
        self._by_url = {e.url: e for e in self.engines}
        self.target_version: str | None = None
        """The job's current weight version: only engines serving it are routed to (None: no
        version known yet, every healthy engine is routable)."""
        self.adapters = False
        """A LoRA job (`ProxyConfig.lora_base_version`): versions are adapters every engine
        loads by name, so an engine's own (base) version does not hold it out."""
        self.version_reads = 0
        """Counts reads of every engine's version at once, so that a health check's older
        read never overwrites a newer one."""
        self._rng = random.Random(seed)
        """The two-choice draws."""
        self._turn = 0
        """The next engine in turn (where an exact pick starts its scan, the two-choice pick's
        first candidate, `_offset` further)."""
        self._offset = 0 if seed is not None else self._rng.randrange(1 << 30)

    def health_counts(self) -> tuple[int, int]:
        """`(healthy, unhealthy)` engines of the pool."""
        healthy = sum(1 for e in self.engines if e.healthy)
        return healthy, len(self.engines) - healthy

    def __getitem__(self, url: str) -> EngineState:
        return self._by_url[url]

    def get(self, url: str) -> EngineState | None:
        """The engine at `url`, None when it is not (or no longer) in the pool."""
        return self._by_url.get(url)

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self.engines]

    def set_urls(self, urls: list[str]) -> tuple[list[str], list[str]]:
        """Make the pool exactly `urls` (in that order); returns (added, removed) URLs."""
        wanted = dict.fromkeys(urls)
        removed = [e.url for e in self.engines if e.url not in wanted]
        added = [url for url in wanted if url not in self._by_url]
        for url in added:
            self._by_url[url] = EngineState(url, healthy=False, last_error="not checked yet")
        for url in removed:
            del self._by_url[url]
        self.engines = [self._by_url[url] for url in wanted]
        return added, removed

    def routable(self, engine: EngineState) -> bool:
        """Whether `engine` may take new generations (healthy, and on the current version)."""
        if not engine.healthy or engine.draining:
            return False
        return (
            self.target_version is None
            or self.adapters
            or engine.weight_version == self.target_version
        )

    def healthy(self) -> list[EngineState]:
        return [e for e in self.engines if e.healthy]

    def start_drain(self, url: str) -> EngineState | None:
        """Route nothing new to the engine at `url` (None when it is not in the pool)."""
        engine = self._by_url.get(url)
        if engine is not None:
            engine.draining = True
        return engine

    def stop_drain(self, url: str) -> EngineState | None:
        """Route to the engine at `url` again (when it is healthy and on the current version)."""
        engine = self._by_url.get(url)
        if engine is not None:
            engine.draining = False
        return engine

    def _why_not(self, engine: EngineState) -> str:
        if not engine.healthy:
            return engine.last_error or "unhealthy"
        if engine.draining:
            return "draining"
        served = engine.weight_version or "an unknown version"
        return f"serves weight version {served}, not the current {self.target_version}"

    def pick(
        self, sticky: str | None = None, *, exclude: frozenset[str] = frozenset()
    ) -> EngineState:
        """The engine for the next request of a session stuck to `sticky` (if any)."""
        if sticky is not None and sticky not in exclude:
            engine = self._by_url.get(sticky)
            if engine is not None and self.routable(engine):
                return engine
        engines = self.engines
        if len(engines) > EXACT_PICK_UP_TO:
            chosen = self._two_choices(exclude)
            if chosen is not None:
                return chosen
        best: EngineState | None = None
        count = len(engines)
        start = self._turn % count if count else 0
        self._turn += 1
        for i in range(count):
            e = engines[(start + i) % count]
            if (best is None or e.inflight < best.inflight) and (
                self.routable(e) and e.url not in exclude
            ):
                best = e
        if best is None:
            lagging = self.target_version is not None and any(
                e.healthy and not e.draining and e.url not in exclude for e in self.engines
            )
            if lagging:
                message = f"no engine serves the current weight version {self.target_version} yet"
            else:
                message = "no healthy inference engine is available"
            raise ProxyError(
                503,
                errors.NO_HEALTHY_ENGINE,
                message,
                detail={"engines": {e.url: self._why_not(e) for e in self.engines}},
                headers={"Retry-After": "1"},
            )
        return best

    def _two_choices(self, exclude: frozenset[str]) -> EngineState | None:
        """The less loaded of two routable engines: the next one in turn and one drawn at
        random, ties to the one in turn (so an idle fleet is loaded in turn, not at random);
        None when `_DRAWS` tries found neither."""
        engines = self.engines
        count = len(engines)
        first: EngineState | None = None
        for _ in range(_DRAWS):
            e = engines[(self._turn + self._offset) % count]
            self._turn += 1
            if self.routable(e) and e.url not in exclude:
                first = e
                break
        for _ in range(_DRAWS):
            e = self._rng.choice(engines)
            if e is not first and self.routable(e) and e.url not in exclude:
                if first is None or e.inflight < first.inflight:
                    return e
                return first
        return first

    def mark_down(self, url: str, reason: str) -> None:
        """Record a failed check or request (nothing when the engine has left the pool)."""
        engine = self._by_url.get(url)
        if engine is None:
            return
        engine.healthy = False
        engine.failures += 1
        engine.last_error = reason
        engine.draining = False  # a drained engine that ended; what comes back is a new one
        engine.release = None
        engine.weight_version = None
        engine.version_route = None

    def mark_up(self, url: str) -> None:
        engine = self._by_url.get(url)
        if engine is None:
            return
        engine.healthy = True
        engine.failures = 0
        engine.last_error = None

    def snapshot(self) -> list[dict[str, object]]:
        return [
            {
                "url": e.url,
                "healthy": e.healthy,
                "routable": self.routable(e),
                "draining": e.draining,
                "weight_version": e.weight_version,
                "inflight": e.inflight,
                "last_error": e.last_error,
                "sglang_version": e.release,
            }
            for e in self.engines
        ]
