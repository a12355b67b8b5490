"""The loops a serving proxy runs beside its requests: the engine set, engine health and
weight versions, and session expiry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import orjson

from dressage.engine.sglang_support import SERVER_INFO_ROUTES, WEIGHT_VERSION_ROUTES
from dressage.engine.wire import HEALTH, first_served, release_of, weight_version_of
from dressage.proxy.config import read_engine_urls
from dressage.proxy.engine_pool import EngineState
from dressage.proxy.state import ProxyState
from dressage.proxy.upstream import EngineConnections, Reply, UpstreamError

log = logging.getLogger("dressage.proxy")

_VERSION_TIMEOUT_S = 5.0
"""Bound on one weight-version read. SGLang answers it from the HTTP process's own fields
(0.5.23 `http_server.model_info`, 0.5.2 `get_weight_version`), with no round trip to the
scheduler, so it answers at once even while the engine is paused or loading weights."""
PROBE_TIMEOUT_FLOOR_S = 1.0
"""Shortest wait for a health probe's answer (twice the health interval, at most 5 s, at
least this): a loaded machine can take a few hundred ms to answer, and a probe that gives up
sooner marks a healthy engine down."""
SWEEP_BATCH = 32
"""Engines a health sweep probes at once. A larger pool is probed in batches spread over half
the health interval: 1,024 probes sent at once held the replica's requests behind them (the
p99 latency the proxy added was 275 ms at 1,024 engines, `benchmarks/fleet_scale.py`)."""
_INFO_TIMEOUT_S = 10.0
"""Bound on one server-info read (the release): it asks the engine's scheduler for its
internal state, so it is read once per engine (when its release is not known), never as a
probe."""


async def health_loop(state: ProxyState, connections: EngineConnections) -> None:
    """Every `health_interval_s`: take up changes of the engine URLs file, then check every
    engine (`check_engine`); an engine is routed to only while it passes.

    A pause for a weight update can make a probe fail that would pass otherwise: SGLang
    0.5.2's `/health` generates a token, so it blocks while the engine is paused
    (`tokenizer_manager.generate_request` waits on `is_pause_cond`) and would time out,
    marking every engine down exactly when the generations parked at the gate are about to
    resume. (0.5.23's `/health` answers at once, paused or not.) So a failure that a pause
    overlapped is not held against an engine, and while paused only the engines not yet
    taken in are probed: a pass is a pass whenever it came, which lets an engine join while
    publishes follow each other with gaps shorter than one probe.
    """
    interval = state.config.health_interval_s
    while True:
        reload_engine_set(state)
        urls = state.pool.urls
        if state.gate.paused:
            urls = [url for url in urls if not _healthy(state, url)]
        await sweep(urls, lambda url: check_engine(state, connections, url), interval / 2)
        await asyncio.sleep(interval)


async def sweep(
    urls: Sequence[str],
    check: Callable[[str], Awaitable[None]],
    spread_s: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """`check` every URL: all at once up to `SWEEP_BATCH` of them, else `SWEEP_BATCH` at a time
    with pauses that spread the sweep over about `spread_s` (so an engine of a large pool is
    probed every one to one and a half health intervals)."""
    if len(urls) <= SWEEP_BATCH:
        await asyncio.gather(*(check(url) for url in urls))
        return
    pause = spread_s * SWEEP_BATCH / len(urls)
    for start in range(0, len(urls), SWEEP_BATCH):
        if start:
            await sleep(pause)
        await asyncio.gather(*(check(url) for url in urls[start : start + SWEEP_BATCH]))


def _healthy(state: ProxyState, url: str) -> bool:
    engine = state.pool.get(url)
    return engine is not None and engine.healthy


def reload_engine_set(state: ProxyState) -> None:
    """Make the pool the engines listed in `--engine-urls-file` (nothing without one). A file
    that cannot be read or holds a bad entry leaves the pool as it is: the kubelet replaces a
    ConfigMap's files atomically, so that is a mistake to report, not a list to apply."""
    path = state.config.engine_urls_file
    if path is None:
        return
    try:
        urls = read_engine_urls(path)
    except (OSError, ValueError) as exc:
        message = f"engine URLs file not applied, keeping {len(state.pool.urls)} engines: {exc}"
        if message != state.engine_set_error:
            log.warning(message)
        state.engine_set_error = message
        return
    state.engine_set_error = None
    added, removed = state.pool.set_urls(urls)
    for url in added:
        state.metrics.engine_health(url, False)
        log.info("engine %s joined the pool", url)
    for url in removed:
        state.metrics.engine_left(url)
        log.info("engine %s left the pool", url)


async def check_engine(state: ProxyState, connections: EngineConnections, url: str) -> None:
    """Probe one engine's `/health`, and once it passes read its release (when not known) and
    its weight version. A failure a pause overlapped is dropped (see `health_loop`); a pass
    stands. The version read is applied only when no newer read (the one every continue
    makes, `refresh_weight_versions`) was applied meanwhile, so a read that a weight update
    overtook never labels an engine with the version it had before."""
    gate = state.gate
    epoch = gate.epoch
    timeout_s = max(PROBE_TIMEOUT_FLOOR_S, min(5.0, state.config.health_interval_s * 2))
    try:
        reply = await connections.request("GET", url, HEALTH, timeout_s=timeout_s)
        ok = reply.status == 200
        reason = f"health check answered HTTP {reply.status}"
    except UpstreamError as exc:
        ok, reason = False, f"health check failed: {type(exc).__name__}: {exc}"
    if not ok and (gate.paused or gate.epoch != epoch):
        return
    engine = state.pool.get(url)
    if engine is None:
        return  # left the pool while it was probed
    if ok:
        await ensure_release(connections, url, engine)
        reads = state.pool.version_reads
        version = await read_weight_version(connections, url, engine)
        if state.pool.get(url) is not engine:
            return  # left (or left and came back) while its version was read
        if state.pool.version_reads == reads:  # else a newer read has already been applied
            engine.weight_version = version
        state.pool.mark_up(url)
    elif engine.healthy or engine.last_error != reason:
        state.pool.mark_down(url, reason)
    state.metrics.engine_health(url, ok)


async def get_moved(
    connections: EngineConnections,
    url: str,
    routes: tuple[str, ...],
    known: str | None,
    timeout_s: float,
) -> tuple[str, Reply]:
    """GET the route of `routes` (a route that moved between releases, newest name first) the
    engine serves (`wire.first_served`: `known` when it answered before, else each in turn
    while they answer 404). Returns the path asked last and its reply; `UpstreamError` when
    the engine did not reply."""

    async def get(path: str) -> Reply:
        return await connections.request("GET", url, path, timeout_s=timeout_s)

    return await first_served(routes, get, lambda reply: reply.status == 404, known=known)


async def read_weight_version(
    connections: EngineConnections, url: str, engine: EngineState | None = None
) -> str | None:
    """The weight version an engine reports (`sglang_support.WEIGHT_VERSION_ROUTES`), None
    when it does not answer one. The route that answered is remembered on `engine`."""
    known = engine.version_route if engine is not None else None
    try:
        path, reply = await get_moved(
            connections, url, WEIGHT_VERSION_ROUTES, known, _VERSION_TIMEOUT_S
        )
        data = orjson.loads(reply.body) if reply.status == 200 else None
    except (UpstreamError, ValueError):
        return None
    if engine is not None and reply.status == 200:
        engine.version_route = path
    return weight_version_of(data)


async def refresh_weight_versions(
    state: ProxyState, connections: EngineConnections, known: Mapping[str, str] | None = None
) -> None:
    """Read every engine's weight version now (after a publish, or when the publisher states
    the current version), so routing follows at once rather than at the next health check.
    `known`: engines whose version the caller just saw them take (a publish's successful
    loads), recorded without a read."""
    known = known or {}
    urls = [url for url in state.pool.urls if url not in known]
    versions = await asyncio.gather(
        *(read_weight_version(connections, url, state.pool.get(url)) for url in urls)
    )
    state.pool.version_reads += 1
    for url, version in [*zip(urls, versions, strict=True), *known.items()]:
        engine = state.pool.get(url)
        if engine is not None:
            engine.weight_version = version


async def ensure_release(connections: EngineConnections, url: str, engine: EngineState) -> None:
    """Read the release of `engine` (at `url`) now when no health check has read it yet: an
    engine listed at the proxy's start counts as healthy before its first check, and the body
    a pause or a checkpoint load sends depends on the release."""
    if engine.release is None:
        engine.release = await read_release(connections, url)


async def read_release(connections: EngineConnections, url: str) -> str | None:
    """The SGLang release an engine reports in its server info (`version`), if it does."""
    try:
        _, reply = await get_moved(connections, url, SERVER_INFO_ROUTES, None, _INFO_TIMEOUT_S)
        return release_of(orjson.loads(reply.body) if reply.status == 200 else None)
    except (UpstreamError, ValueError):
        return None


async def expiry_loop(state: ProxyState) -> None:
    """Drop idle sessions and unread records past the session TTL, a few times per TTL."""
    interval = min(30.0, max(0.05, state.config.session_ttl_s / 4))
    while True:
        await asyncio.sleep(interval)
        expired = state.store.expire(state.clock())
        if expired:
            state.metrics.expired_sessions.inc(len(expired))
