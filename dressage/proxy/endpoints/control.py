"""Control and observation: `/pause_generation`, `/continue_generation`, the engine set
(`/dressage/engines`, `/dressage/weight_version`), `/health`, `/metrics`.

Pause closes the proxy's gate (new generations wait) and then pauses every engine; continue
resumes the engines and then opens the gate. `{"mode", "engines": false}` closes the gate only,
and `/continue_generation` `{"engines": false}` opens it only: with several proxy replicas in
front of one engine set, the client closes every replica's gate before any engine is paused,
since an engine's pause aborts the generations of all replicas and a replica must know such an
abort for a pause's (`dressage.proxy.client`).
`"shard": [i, n]` commands only the engines of shard `i` of `n` (`dressage.proxy.affinity.
shard_of`, a hash of each engine's URL), so that `n` replicas share a publish's engine
commands; `/continue_generation` `{"gate": false}` continues engines and leaves the gate
closed, so that no replica routes a new turn before every shard is continued (the client
opens every gate after: `{"engines": false}`). The answer reports each engine's result, 502
`engine_error` when one did not take the command. Engines whose SGLang release predates the
pause modes (before 0.5.6) get the body they act on, `{}`: every pause aborts there.

The current weight version. The weight publisher states the job's current version, on
`/continue_generation` `{"weight_version": V, "serving"?: [url, ...]}` after a publish (`serving`:
the engines it saw load V, whose versions are then not read again) and on
`POST /dressage/weight_version` `{"weight_version": V}` otherwise (at the trainer's start,
after bringing a lagging engine up to date). The proxy then reads every engine's weight
version before answering (and before the gate opens), where its release reports it
(`/model_info` on 0.5.23, `/get_weight_version` on 0.5.2: `dressage.proxy.background`), and
routes only to engines serving V (`dressage.proxy.engine_pool`). `GET /dressage/engines` answers
`{"weight_version": V | null, "engines": [{"url", "healthy", "routable", "draining",
"weight_version", "inflight", "last_error", "sglang_version"}, ...]}`; the publisher reads the
engine set there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from dressage.asgi import Answer, HttpRequest
from dressage.data.versions import normalize_version
from dressage.engine import sglang_support as sglang
from dressage.engine.wire import CONTINUE_GENERATION, PAUSE_GENERATION
from dressage.proxy import errors
from dressage.proxy.affinity import shard_of
from dressage.proxy.answers import error_response, json_response
from dressage.proxy.background import ensure_release, refresh_weight_versions
from dressage.proxy.errors import ProxyError, invalid
from dressage.proxy.state import ProxyState
from dressage.proxy.upstream import (
    ConnectFailed,
    ConnectionLost,
    EngineConnections,
    Reply,
    UpstreamError,
)

PAUSE_MODES = ("abort", "in_place", "retract")
_ENGINE_COMMAND_TIMEOUT_S = 30.0
_RESEND_DELAYS_S = (0.0, 0.2, 0.5, 1.0)
"""Waits before each re-send of a command whose connection the engine closed."""


async def pause(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    mode = body.get("mode", "abort")
    if mode not in PAUSE_MODES:
        raise invalid("mode must be abort, in_place or retract", "mode")
    to_engines = body.get("engines", True)
    if not isinstance(to_engines, bool):
        raise invalid("engines must be true or false (false: close the gate only)", "engines")
    shard = _shard(body, to_engines)
    state.gate.pause()
    if not to_engines:
        return _control_answer(_Results({}, set()), state)
    failures = await _broadcast(
        state, PAUSE_GENERATION, {"mode": mode}, legacy_body={}, shard=shard
    )
    return _control_answer(failures, state)


async def continue_generation(
    state: ProxyState, request: HttpRequest, body: dict[str, Any]
) -> Answer:
    stated = "weight_version" in body
    version = _weight_version(body) if stated else None
    to_engines = body.get("engines", True)
    if not isinstance(to_engines, bool):
        raise invalid("engines must be true or false (false: open the gate only)", "engines")
    shard = _shard(body, to_engines)
    open_gate = body.get("gate", True)
    if not isinstance(open_gate, bool):
        raise invalid("gate must be true or false (false: leave the gate closed)", "gate")
    if not (to_engines or open_gate):
        raise invalid("engines false and gate false leave nothing to do", "gate")
    serving = body.get("serving", [])
    if not isinstance(serving, list) or not all(isinstance(u, str) for u in serving):
        raise invalid("serving must be a list of engine URLs", "serving")
    if serving and version is None:
        raise invalid("serving names engines that serve weight_version: state it", "serving")
    failures = _Results({}, set())
    if to_engines:
        failures = await _broadcast(state, CONTINUE_GENERATION, {}, shard=shard)
    if stated:
        await _apply_weight_version(state, version, serving)
    if open_gate:
        state.gate.resume()
    return _control_answer(failures, state)


def _shard(body: dict[str, Any], to_engines: bool) -> tuple[int, int] | None:
    """The body's `"shard": [index, count]` (None when absent); 400 naming it when it is not
    two integers `0 <= index < count`, or when no engine is to be commanded."""
    value = body.get("shard")
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not 0 <= value[0] < value[1]
    ):
        raise invalid("shard must be [index, count] with 0 <= index < count", "shard")
    if not to_engines:
        raise invalid("shard names engines to command: engines must not be false", "shard")
    return value[0], value[1]


async def engines(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    return json_response(_engine_set(state))


async def set_weight_version(
    state: ProxyState, request: HttpRequest, body: dict[str, Any]
) -> Answer:
    if "weight_version" not in body:
        raise invalid("weight_version is required (a version label, or null)", "weight_version")
    await _apply_weight_version(state, _weight_version(body))
    return json_response(_engine_set(state))


def _weight_version(body: dict[str, Any]) -> str | None:
    value = body["weight_version"]
    if value is None:
        return None
    version = normalize_version(value) if isinstance(value, str) else None
    if version is None:
        raise invalid(
            "weight_version must be a version label (a non-empty string) or null",
            "weight_version",
        )
    return version


async def _apply_weight_version(
    state: ProxyState, version: str | None, serving: Sequence[str] = ()
) -> None:
    """Route only to engines serving `version` from now on (None: to every healthy one),
    with every engine's version read first so routing follows at once; the engines in
    `serving` were just seen to load it and are not read (in a LoRA job an engine reports its
    base version whatever adapter it holds, so every one is read)."""
    assert state.connections is not None, "engines are read only while the app serves"
    known: dict[str, str] = {}
    if version is not None and not state.pool.adapters:
        known = dict.fromkeys((url.rstrip("/") for url in serving), version)
    await refresh_weight_versions(state, state.connections, known)
    state.pool.target_version = version


def _engine_set(state: ProxyState) -> dict[str, Any]:
    return {"weight_version": state.pool.target_version, "engines": state.pool.snapshot()}


@dataclass
class _Results:
    """Each engine's answer to a command (None: it took it); `excused` are the engines that
    were unhealthy when it was sent or took no connection, whose failure does not fail the
    command."""

    failures: dict[str, str | None]
    excused: set[str]


async def _broadcast(
    state: ProxyState,
    path: str,
    body: dict[str, Any],
    *,
    legacy_body: dict[str, Any] | None = None,
    shard: tuple[int, int] | None = None,
) -> _Results:
    """POST `body` to `path` on every engine of the pool (of shard `(index, count)` only,
    `shard_of`, when given).

    An engine that is unhealthy when the command is sent (starting, as a newly added one is,
    or down) is commanded too, so none stays paused once it recovers, but its failure is
    excused: it is not routed to, runs none of the proxy's generations, and the publisher
    brings it to the current weights once it passes a health check. An engine that takes no
    connection (`ConnectFailed`: its process is gone, as after an eviction, before a health
    check noticed) is down as well: it is marked down, and its failure is excused the same way.
    A command whose connection the engine closed (`ConnectionLost`: its process ending
    meanwhile) is sent again (`send_command`), so an engine that ended is told from one
    that is up.

    `legacy_body` goes to engines whose release predates the pause modes (SGLang before 0.5.6
    reads no body and aborts every in-flight request on a pause: the proxy then resumes or
    regenerates them as after any abort, so `in_place` and `retract` become `abort` there); an
    engine whose release no health check has read yet is asked it first.
    """
    connections = state.connections
    assert connections is not None, "engines are commanded only while the app serves"
    content = orjson.dumps(body)
    legacy = None if legacy_body is None else orjson.dumps(legacy_body)
    excused = {e.url for e in state.pool.engines if not e.healthy}

    async def send(url: str) -> str | None:
        engine = state.pool.get(url)
        if engine is None:
            return None  # left the pool meanwhile
        if legacy is not None:
            await ensure_release(connections, url, engine)
        payload = content if legacy is None or engine.supports(sglang.PAUSE_MODES) else legacy
        try:
            reply = await send_command(connections, url, path, payload)
        except ConnectFailed as exc:
            reason = f"{path} failed: ConnectFailed: {exc}"
            state.pool.mark_down(url, reason)
            state.metrics.engine_health(url, False)
            excused.add(url)
            return f"ConnectFailed: {exc}"
        except UpstreamError as exc:
            return f"{type(exc).__name__}: {exc}"
        if reply.status >= 400:
            return f"HTTP {reply.status}: {reply.body[:200].decode(errors='replace')}"
        return None

    urls = state.pool.urls
    if shard is not None:
        index, count = shard
        urls = [url for url in urls if shard_of(url, count) == index]
    answers = await asyncio.gather(*(send(url) for url in urls))
    return _Results(dict(zip(urls, answers, strict=True)), excused)


async def send_command(
    connections: EngineConnections,
    url: str,
    path: str,
    payload: bytes,
    timeout_s: float = _ENGINE_COMMAND_TIMEOUT_S,
    *,
    fresh: bool = True,
) -> Reply:
    """POST one command to one engine, on a new connection (an idle one may have been closed
    by the engine, or by its process ending, unnoticed yet); `fresh=False`: on an idle one
    when there is one (a weight update and its flush, which follow a pause's connection).
    One the engine closes before its reply (a process that is ending resets connections for a
    moment before they are refused, an idle connection it had closed) is sent again, on a new
    connection, a few times over about 2 s: the commands are idempotent."""
    for delay in (*_RESEND_DELAYS_S, None):
        try:
            return await connections.request(
                "POST", url, path, payload, timeout_s=timeout_s, fresh=fresh
            )
        except ConnectionLost:
            if delay is None:
                raise
            fresh = True
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def _control_answer(results: _Results, state: ProxyState) -> Answer:
    shown = {}
    failed = 0
    for url, failure in results.failures.items():
        if failure is None:
            shown[url] = "ok"
        elif url in results.excused:
            shown[url] = f"not routed (unhealthy), {failure}"
        else:
            shown[url] = failure
            failed += 1
    data = {"paused": state.gate.paused, "epoch": state.gate.epoch, "engines": shown}
    if failed:
        err = ProxyError(
            502, errors.ENGINE_ERROR, f"{failed} engine(s) did not take the command", detail=data
        )
        return error_response(err)
    return json_response(data)


async def health(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    healthy = bool(state.pool.healthy())
    return json_response(
        {
            "status": "ok" if healthy else errors.NO_HEALTHY_ENGINE,
            "weight_version": state.pool.target_version,
            "engines": state.pool.snapshot(),
            "paused": state.gate.paused,
            "active_sessions": len(state.store),
            "finished_sessions": state.store.finished_count,
            "inflight": state.inflight,
        },
        200 if healthy else 503,
    )


async def metrics(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    return Answer(state.metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8")
