"""The loops a serving proxy runs beside its requests: engine health and session expiry."""

from __future__ import annotations

import asyncio

import orjson

from dressage.engine.sglang_support import parse_version
from dressage.proxy.state import ProxyState
from dressage.proxy.upstream import EngineConnections, UpstreamError


async def health_loop(state: ProxyState, connections: EngineConnections) -> None:
    """Probe every engine's `/health`; an engine is routed to only while it answers 200.

    No engine is judged while generation is paused for a weight update, nor by a probe that a
    pause overlapped: SGLang's `/health` generates a token, so it blocks while the engine is
    paused (`tokenizer_manager.generate_request` waits on `is_pause_cond`, v0.5.2) and would
    time out, marking every engine down exactly when the generations parked at the gate are
    about to resume.
    """
    interval = state.config.health_interval_s
    gate = state.gate

    async def probe(url: str) -> None:
        epoch = gate.epoch
        try:
            reply = await connections.request(
                "GET", url, "/health", timeout_s=min(5.0, interval * 2)
            )
            ok = reply.status == 200
            reason = f"health check answered HTTP {reply.status}"
        except UpstreamError as exc:
            ok, reason = False, f"health check failed: {type(exc).__name__}: {exc}"
        if gate.paused or gate.epoch != epoch:
            return
        if ok and state.pool[url].release is None:
            state.pool[url].release = await _release(connections, url)
        if ok:
            state.pool.mark_up(url)
        elif state.pool[url].healthy or state.pool[url].last_error != reason:
            state.pool.mark_down(url, reason)
        state.metrics.engine_healthy.labels(url).set(1 if ok else 0)

    while True:
        if not gate.paused:
            await asyncio.gather(*(probe(e.url) for e in state.pool.engines))
        await asyncio.sleep(interval)


async def _release(connections: EngineConnections, url: str) -> str | None:
    """The SGLang release an engine reports in `/get_server_info` (`version`), if it does."""
    try:
        reply = await connections.request("GET", url, "/get_server_info", timeout_s=10.0)
        info = orjson.loads(reply.body) if reply.status == 200 else None
    except (UpstreamError, ValueError):
        return None
    version = info.get("version") if isinstance(info, dict) else None
    if not isinstance(version, str):
        return None
    try:
        parse_version(version)
    except ValueError:
        return None
    return version


async def expiry_loop(state: ProxyState) -> None:
    """Drop idle sessions and unread records past the session TTL, a few times per TTL."""
    interval = min(30.0, max(0.05, state.config.session_ttl_s / 4))
    while True:
        await asyncio.sleep(interval)
        expired = state.store.expire(state.clock())
        if expired:
            state.metrics.expired_sessions.inc(len(expired))
